import unittest

from metrics.numeric import square, centre


class BrimarTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(square(5), 25)
