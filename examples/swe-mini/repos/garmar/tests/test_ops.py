import unittest

from mathlib.ops import negate, upper_of


class GarmarTest(unittest.TestCase):
    def test_negate(self):
        self.assertEqual(negate(7), -7)
