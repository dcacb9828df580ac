import unittest

from arith.funcs import triple, join_sum


class ElixTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
