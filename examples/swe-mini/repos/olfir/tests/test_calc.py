import unittest

from figures.calc import half, shout


class OlfirTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
