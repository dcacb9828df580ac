import unittest

from arith.funcs import half, combine


class MorixTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
