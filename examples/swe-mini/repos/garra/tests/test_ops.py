import unittest

from figures.ops import negate, biggest


class GarraTest(unittest.TestCase):
    def test_negate(self):
        self.assertEqual(negate(7), -7)
