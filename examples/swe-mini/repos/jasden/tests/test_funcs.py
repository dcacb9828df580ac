import unittest

from sums.funcs import double, last


class JasdenTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
