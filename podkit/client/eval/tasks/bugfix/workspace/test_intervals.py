import unittest

from intervals import merge


class MergeTest(unittest.TestCase):
    def test_empty(self):
        self.assertEqual(merge([]), [])

    def test_disjoint_are_sorted(self):
        self.assertEqual(merge([(8, 10), (1, 3)]), [(1, 3), (8, 10)])

    def test_overlapping(self):
        self.assertEqual(merge([(1, 3), (2, 6), (8, 10)]), [(1, 6), (8, 10)])

    def test_contained(self):
        self.assertEqual(merge([(1, 5), (2, 3)]), [(1, 5)])

    def test_touching(self):
        self.assertEqual(merge([(1, 2), (2, 4)]), [(1, 4)])

    def test_chain(self):
        self.assertEqual(merge([(5, 7), (1, 2), (2, 5), (9, 9)]), [(1, 7), (9, 9)])


if __name__ == "__main__":
    unittest.main()
