def summarize(orders):
    lines = []
    total = 0
    count = 0
    by_customer = {}
    for order in orders:
        if order["status"] != "cancelled":
            amount = 0
            for item in order["items"]:
                if item["qty"] > 0:
                    if item.get("discount"):
                        amount = amount + item["price"] * item["qty"] * (1 - item["discount"])
                    else:
                        amount = amount + item["price"] * item["qty"]
            if amount > 0:
                count = count + 1
                total = total + amount
                if order["customer"] in by_customer:
                    by_customer[order["customer"]] = by_customer[order["customer"]] + amount
                else:
                    by_customer[order["customer"]] = amount
    lines.append("orders: " + str(count))
    lines.append("total: " + "%.2f" % total)
    if count > 0:
        lines.append("average: " + "%.2f" % (total / count))
    else:
        lines.append("average: 0.00")
    best = None
    for customer in by_customer:
        if best is None or by_customer[customer] > by_customer[best]:
            best = customer
    if best is not None:
        lines.append("top customer: " + best + " (" + "%.2f" % by_customer[best] + ")")
    else:
        lines.append("top customer: none")
    return "\n".join(lines)
