import unittest

from counts.funcs import succ, total_upto


class CorloTest(unittest.TestCase):
    def test_succ(self):
        self.assertEqual(succ(9), 10)
