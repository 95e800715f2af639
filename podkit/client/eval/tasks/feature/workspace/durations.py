"""Durations as short strings: 5400 seconds <-> "1h30m"."""

UNITS = (("h", 3600), ("m", 60), ("s", 1))


def format_duration(seconds):
    """5400 -> "1h30m"; 0 -> "0s"."""
    if seconds < 0:
        raise ValueError("negative duration")
    parts = []
    for name, size in UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{name}")
    return "".join(parts) or "0s"


def parse_duration(text):
    """The inverse of format_duration: "1h30m" -> 5400."""
    raise NotImplementedError
