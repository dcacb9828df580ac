import unittest

from stats.lib import double, centre


class PragonTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
