import unittest

from mathlib.lib import succ, last


class OlloTest(unittest.TestCase):
    def test_succ(self):
        self.assertEqual(succ(9), 10)
