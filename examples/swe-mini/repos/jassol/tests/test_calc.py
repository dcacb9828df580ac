import unittest

from mathlib.calc import triple, caps


class JassolTest(unittest.TestCase):
    def test_triple(self):
        self.assertEqual(triple(4), 12)
