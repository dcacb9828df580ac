import unittest

from measure.ops import double, tail_item


class NesnuTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
