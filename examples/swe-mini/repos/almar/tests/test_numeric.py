import unittest

from measure.numeric import succ, maximum


class AlmarTest(unittest.TestCase):
    def test_succ(self):
        self.assertEqual(succ(9), 10)
