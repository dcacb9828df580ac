import unittest

from metrics.funcs import double, biggest


class ElnuTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
