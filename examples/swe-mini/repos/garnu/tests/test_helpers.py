import unittest

from numkit.helpers import half, largest


class GarnuTest(unittest.TestCase):
    def test_half(self):
        self.assertEqual(half(10), 5)
