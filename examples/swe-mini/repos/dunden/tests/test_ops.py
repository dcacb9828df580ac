import unittest

from figures.ops import square, triangle


class DundenTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(square(5), 25)
