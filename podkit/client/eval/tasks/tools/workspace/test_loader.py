import unittest

from config import parse_line
from loader import load


class LoaderTest(unittest.TestCase):
    def test_separators(self):
        self.assertEqual(parse_line(" a = 1 "), ("a", "1"))
        self.assertEqual(parse_line("b: 2"), ("b", "2"))
        self.assertEqual(parse_line("url = http://x"), ("url", "http://x"))
        self.assertEqual(parse_line("when: a=b"), ("when", "a=b"))

    def test_not_a_setting(self):
        with self.assertRaises(ValueError):
            parse_line("nothing here")

    def test_load_skips_comments_and_blank_lines(self):
        text = "# settings\n\na = 1\n  # indented comment\nb: 2\n   \n"
        self.assertEqual(load(text), {"a": "1", "b": "2"})


if __name__ == "__main__":
    unittest.main()
