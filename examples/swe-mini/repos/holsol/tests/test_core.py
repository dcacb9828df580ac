import unittest

from sums.core import square, tail_item


class HolsolTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(square(5), 25)
