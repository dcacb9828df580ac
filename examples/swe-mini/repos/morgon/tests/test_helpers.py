import unittest

from measure.helpers import negate, combine


class MorgonTest(unittest.TestCase):
    def test_negate(self):
        self.assertEqual(negate(7), -7)
