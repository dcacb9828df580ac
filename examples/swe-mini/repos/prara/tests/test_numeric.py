import unittest

from measure.numeric import triple, final


class PraraTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
