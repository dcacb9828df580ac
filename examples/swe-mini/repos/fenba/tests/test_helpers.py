import unittest

from sums.helpers import half, final


class FenbaTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
