import unittest

from report import summarize

ORDERS = [
    {"customer": "ada", "status": "paid", "items": [{"price": 10.0, "qty": 2}, {"price": 5.0, "qty": 0}]},
    {"customer": "bob", "status": "cancelled", "items": [{"price": 99.0, "qty": 1}]},
    {"customer": "bob", "status": "paid", "items": [{"price": 20.0, "qty": 1, "discount": 0.25}]},
    {"customer": "ada", "status": "open", "items": [{"price": 2.5, "qty": 4}]},
    {"customer": "cy", "status": "paid", "items": [{"price": 7.0, "qty": 0}]},
]


class SummarizeTest(unittest.TestCase):
    def test_orders(self):
        self.assertEqual(
            summarize(ORDERS),
            "orders: 3\ntotal: 45.00\naverage: 15.00\ntop customer: ada (30.00)",
        )

    def test_empty(self):
        self.assertEqual(summarize([]), "orders: 0\ntotal: 0.00\naverage: 0.00\ntop customer: none")

    def test_only_cancelled(self):
        self.assertEqual(summarize(ORDERS[1:2]), "orders: 0\ntotal: 0.00\naverage: 0.00\ntop customer: none")

    def test_single(self):
        self.assertEqual(summarize(ORDERS[2:3]), "orders: 1\ntotal: 15.00\naverage: 15.00\ntop customer: bob (15.00)")


if __name__ == "__main__":
    unittest.main()
