import unittest

from metrics.ops import square, biggest


class LumraTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(square(5), 25)
