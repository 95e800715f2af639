"""Settings files."""

from config import parse_line


def load(text):
    """The settings in ``text`` as a dict."""
    return dict(parse_line(line) for line in text.splitlines())
