import unittest

from arith.lib import double, mean


class AlfirTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
