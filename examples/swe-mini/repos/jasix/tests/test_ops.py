import unittest

from measure.ops import half, yell


class JasixTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
