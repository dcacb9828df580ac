import unittest

from numkit.tools import double, shout


class JasgonTest(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(4), 8)
