"""Text another party wrote (a lock's holder on the controller, a server's error answer), made
safe to print on an operator's terminal: every character that is not printable (an escape
code's ESC, a newline, a carriage return, a right-to-left override) and every backslash is
shown as Python writes it in a string literal (`\\x1b`, `\\n`, `\\u202e`, `\\\\`), so what is
printed is one line that says exactly what was there and does nothing to the terminal."""

from __future__ import annotations


def printable(text: str, limit: int | None = None) -> str:
    """`text` escaped (see the module's docstring); with `limit`, at most that many of its
    characters, and `...` where some were cut."""
    cut = limit is not None and len(text) > limit
    if cut:
        text = text[:limit]
    out = "".join(_one(c) for c in text)
    return out + "..." if cut else out


def _one(c: str) -> str:
    if c == "\\":
        return "\\\\"
    if c.isprintable():
        return c
    return repr(c)[1:-1]
