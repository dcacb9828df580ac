import unittest

from sums.mathx import double, sum_to


class JasbaTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
