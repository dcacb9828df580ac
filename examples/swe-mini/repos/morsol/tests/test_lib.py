import unittest

from tally.lib import square, centre


class MorsolTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(square(5), 25)
