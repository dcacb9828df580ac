import unittest

from numkit.numeric import triple, running


class BriraTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
