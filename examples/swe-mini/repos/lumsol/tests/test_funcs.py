import unittest

from measure.funcs import negate, final


class LumsolTest(unittest.TestCase):
    def test_negate(self):
        self.assertEqual(negate(7), -7)
