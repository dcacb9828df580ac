import unittest

from figures.mathx import square, maximum


class HoldenTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(square(5), 25)
