import unittest

from mathlib.lib import triple, sum_two


class NesraTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
