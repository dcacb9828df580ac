import unittest

from figures.util import negate, loud


class JasraTest(unittest.TestCase):
    def test_negate(self):
        self.assertEqual(negate(7), -7)
