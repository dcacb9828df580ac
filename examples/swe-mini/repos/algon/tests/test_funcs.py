import unittest

from metrics.funcs import triple, upper_of


class AlgonTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
