import unittest

from tally.numeric import square, add


class IvfirTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(square(5), 25)
