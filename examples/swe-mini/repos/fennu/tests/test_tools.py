import unittest

from numkit.tools import triple, last


class FennuTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
