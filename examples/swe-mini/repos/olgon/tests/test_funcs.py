import unittest

from measure.funcs import negate, loud


class OlgonTest(unittest.TestCase):
    def test_negate(self):
        self.assertEqual(negate(7), -7)
