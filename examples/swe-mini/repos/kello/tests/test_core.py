import unittest

from metrics.core import half, average


class KelloTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
