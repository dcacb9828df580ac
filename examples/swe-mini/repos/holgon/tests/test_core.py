import unittest

from metrics.core import triple, mean_of


class HolgonTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
