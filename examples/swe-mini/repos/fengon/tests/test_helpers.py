import unittest

from counts.helpers import double, plus


class FengonTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
