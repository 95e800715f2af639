import unittest

from durations import format_duration, parse_duration


class DurationTest(unittest.TestCase):
    def test_format(self):
        self.assertEqual(format_duration(5400), "1h30m")
        self.assertEqual(format_duration(0), "0s")

    def test_parse(self):
        cases = {"1h30m": 5400, "45s": 45, "2h": 7200, "90m": 5400, "1h5m10s": 3910, "0s": 0}
        for text, seconds in cases.items():
            self.assertEqual(parse_duration(text), seconds, text)

    def test_round_trip(self):
        for seconds in (1, 59, 60, 61, 3599, 3600, 86399):
            self.assertEqual(parse_duration(format_duration(seconds)), seconds)

    def test_rejects(self):
        for text in ("", "5", "5x", "h", "1h30"):
            with self.assertRaises(ValueError, msg=text):
                parse_duration(text)


if __name__ == "__main__":
    unittest.main()
