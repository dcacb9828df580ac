import unittest

from numkit.ops import triple, sum_two


class PraixTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
