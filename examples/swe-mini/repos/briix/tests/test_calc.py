import unittest

from tally.calc import half, largest


class BriixTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
