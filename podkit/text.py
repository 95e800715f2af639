"""Text read from a host (a stopped marker's reason, a log tail, a process name, a server's error
body, a model's output) is data: :func:`clean` makes it safe to print on a terminal.

A terminal obeys what it is sent. An escape sequence in a log line or a forged marker can clear the
screen, move the cursor over earlier lines, retitle the window, write the user's clipboard (OSC 52)
or hide text; a carriage return can overwrite a line with another. :func:`clean` removes every
such sequence whole (CSI ``ESC [``, OSC ``ESC ]`` up to BEL or ST, DCS/SOS/PM/APC strings, their
8-bit C1 forms, two-byte ``ESC x``), then every other C0 and C1 control, DEL, and the Unicode
bidirectional overrides that reorder what a line seems to say. A tab is kept; a newline is kept only
where a multi-line text is meant (``lines=True``), else it becomes a space, so one host field prints
as one line. JSON output needs none of this: ``json.dumps`` escapes every control character.
"""

from __future__ import annotations

import re

#: Whole sequences: CSI (7- and 8-bit), the string controls (OSC, DCS, SOS, PM, APC) up to their
#: terminator (BEL, ST 7- or 8-bit) or the line's end, and the two-byte escapes (ESC then one byte).
_SEQUENCES = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\n]*?(?:\x07|\x1b\\|\x9c|(?=\n)|\Z)"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"
)
#: Single characters: C0 but tab and newline, DEL, C1, and the bidi embeddings, overrides and isolates.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: object, lines: bool = False) -> str:
    """``text`` (any value; None is ``""``) as a string safe on a terminal: no escape sequence, no
    control character but tab, and a newline only when ``lines`` (a log tail); else one line."""
    if text is None:
        return ""
    out = _CONTROLS.sub("", _SEQUENCES.sub("", str(text).replace("\r\n", "\n")))
    return out if lines else out.replace("\n", " ")


def clean_lines(lines: list[object]) -> list[str]:
    """Each of ``lines`` cleaned as one line (a log tail as a list)."""
    return [clean(line) for line in lines]
