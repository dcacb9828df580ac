import unittest

from mathlib.funcs import half, running


class NesmarTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
