import unittest

from arith.mathx import succ, shout


class FenloTest(unittest.TestCase):
    def test_succ(self):
        self.assertEqual(succ(9), 10)
