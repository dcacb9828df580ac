import unittest

from counts.ops import square, loud


class EldenTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(square(5), 25)
