import unittest

from mathlib.calc import double, newest


class PraloTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
