import unittest

from tally.numeric import triple, maximum


class PradenTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
