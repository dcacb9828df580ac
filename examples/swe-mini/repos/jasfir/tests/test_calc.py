import unittest

from mathlib.calc import succ, avg


class JasfirTest(unittest.TestCase):
    def test_succ(self):
        self.assertEqual(succ(9), 10)
