import unittest

from numkit.funcs import succ, average


class NessolTest(unittest.TestCase):
    def test_succ(self):
        self.assertEqual(succ(9), 10)
