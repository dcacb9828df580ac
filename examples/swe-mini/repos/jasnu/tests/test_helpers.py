import unittest

from measure.helpers import double, top_of


class JasnuTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
