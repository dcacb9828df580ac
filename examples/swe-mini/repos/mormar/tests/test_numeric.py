import unittest

from numkit.numeric import square, join_sum


class MormarTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(square(5), 25)
