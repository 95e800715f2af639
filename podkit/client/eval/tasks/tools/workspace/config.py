"""One setting per line."""


def parse_line(line):
    """'key = value' -> ('key', 'value')."""
    if "=" not in line:
        raise ValueError(f"not a setting: {line!r}")
    key, value = line.split("=", 1)
    return key.strip(), value.strip()
