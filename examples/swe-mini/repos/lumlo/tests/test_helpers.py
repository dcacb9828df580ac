import unittest

from measure.helpers import triple, total_upto


class LumloTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
