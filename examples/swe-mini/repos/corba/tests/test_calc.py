import unittest

from arith.calc import negate, tail_item


class CorbaTest(unittest.TestCase):
    def test_negate(self):
        self.assertEqual(negate(7), -7)
