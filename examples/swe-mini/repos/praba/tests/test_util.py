import unittest

from arith.util import half, mean_of


class PrabaTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
