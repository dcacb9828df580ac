import unittest

from figures.mathx import succ, add


class ElraTest(unittest.TestCase):
    def test_succ(self):
        self.assertEqual(succ(9), 10)
