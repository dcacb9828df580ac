import unittest

from sums.ops import half, largest


class PramarTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
