import unittest

from tally.lib import succ, series


class DunbaTest(unittest.TestCase):
    def test_succ(self):
        self.assertEqual(succ(9), 10)
