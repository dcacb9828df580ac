import unittest

from figures.calc import negate, sum_two


class DunraTest(unittest.TestCase):
    def test_negate(self):
        self.assertEqual(negate(7), -7)
