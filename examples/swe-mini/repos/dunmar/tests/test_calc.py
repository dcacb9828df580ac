import unittest

from stats.calc import triple, sum_two


class DunmarTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
