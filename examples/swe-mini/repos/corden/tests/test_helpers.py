import unittest

from arith.helpers import triple, centre


class CordenTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
