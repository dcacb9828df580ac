import unittest

from sums.numeric import half, centre


class PranuTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
