import unittest

from counts.mathx import succ, sum_to


class ElmarTest(unittest.TestCase):
    def test_succ(self):
        self.assertEqual(succ(9), 10)
