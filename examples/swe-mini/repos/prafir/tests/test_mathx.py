import unittest

from numkit.mathx import double, sum_to


class PrafirTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
