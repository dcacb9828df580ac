import unittest

from stats.numeric import succ, latest


class KelsolTest(unittest.TestCase):
    def test_succ(self):
        self.assertEqual(succ(9), 10)
