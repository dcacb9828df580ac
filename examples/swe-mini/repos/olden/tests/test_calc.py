import unittest

from tally.calc import double, sum_to


class OldenTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
