import unittest

from mathlib.calc import double, largest


class IvraTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
