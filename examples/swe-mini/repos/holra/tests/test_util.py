import unittest

from metrics.util import negate, upper_of


class HolraTest(unittest.TestCase):
    def test_negate(self):
        self.assertEqual(negate(7), -7)
