import unittest

from tally.tools import negate, series


class HolixTest(unittest.TestCase):
    def test_negate(self):
        self.assertEqual(negate(7), -7)
