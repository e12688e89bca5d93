"""The one rule for text from elsewhere that is drawn on a terminal.

Everything a person reads on a terminal that another party chose (a producer, a model
through it, a provider, a trace file, a request's passages) goes through this module
before it is written: the live view, the console log lines, ``trace``'s and
``join-traces``' output, the demo table, hints and error messages. A terminal obeys
some characters instead of showing them: C0 controls (ESC starts CSI and OSC
sequences: clear the screen, set the window title, write the clipboard with OSC 52;
CR overwrites a line), DEL, the C1 controls U+0080-U+009F (U+009B is a one-character
CSI on terminals that honour 8-bit controls) and the Unicode bidirectional embeddings,
overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder what follows so
that text reads other than it is. Those, the line and paragraph separators
(U+2028, U+2029) and lone surrogates (which no terminal encoding can write) are the
**refused** characters: each is written as its Python escape (``\\x1b``, ``\\x9b``,
``\\u202e``), the notation ``shared.errors.scrubbed_detail`` uses, never as itself.
Newline and tab are obeyed only in multi-line text (an answer, a partial reply, a
traceback); in a single-line field (an id, a URL, a log value, a table cell) they are
shown too (``\\n``, ``\\t``). A line longer than its bound is cut, with ``…`` at its
end (never inside an escape).

Only what is drawn changes: the result document, ``--result`` files and the JSON trace
keep the text exactly (``shown_json`` writes a JSON document for a terminal with the
refused characters as JSON escapes: the same JSON value). Every function is idempotent
(shown text is shown as it is) and cheap for text that needs nothing: one scan in C.

The escape is for safety, not for reading text back: a backslash is not escaped, so
``\\x1b`` typed as four characters looks like an escaped ESC. The exact text is in the
JSON. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Final

#: Where a line or field was cut at its bound.
CUT_MARK: Final = "\u2026"
#: The longest single-line field by default (an id, a URL, a log value).
MAX_FIELD_CHARS: Final = 256
#: The longest line of multi-line text by default (an answer's paragraph).
MAX_LINE_CHARS: Final = 2000

_REFUSED_RANGES: Final = (
    "\x7f-\x9f"  # DEL and the C1 controls
    "\u2028-\u202e"  # line and paragraph separators; bidi embeddings and overrides
    "\u2066-\u2069"  # bidi isolates
    "\ud800-\udfff"  # surrogates (never a character of their own in text)
)
#: Refused in multi-line text: every C0 control but tab and newline, and the rest.
REFUSED_IN_TEXT: Final = re.compile(f"[\x00-\x08\x0b-\x1f{_REFUSED_RANGES}]")
#: Refused in a single-line field: every C0 control, and the rest.
REFUSED_IN_LINE: Final = re.compile(f"[\x00-\x1f{_REFUSED_RANGES}]")


def escaped(char: str) -> str:
    """One refused character as Python writes it in a literal (``\\x1b``, ``\\u202e``)."""
    return char.encode("unicode_escape").decode("ascii")


def _escape(match: re.Match[str]) -> str:
    return escaped(match.group())


def _cut(text: str, limit: int, refused: re.Pattern[str]) -> str:
    """``text`` escaped, at most ``limit`` characters, the cut marked (never inside an
    escape). Only called when the escaped text is longer than ``limit``."""
    if limit <= len(CUT_MARK):
        return CUT_MARK[:limit]
    pieces: list[str] = []
    size = 0
    room = limit - len(CUT_MARK)
    for char in text[:room]:  # every character shows as one or more
        piece = escaped(char) if refused.match(char) else char
        if size + len(piece) > room:
            break
        pieces.append(piece)
        size += len(piece)
    return "".join(pieces) + CUT_MARK


def _line(text: str, limit: int | None, refused: re.Pattern[str]) -> str:
    shown = refused.sub(_escape, text) if refused.search(text) else text
    return shown if limit is None or len(shown) <= limit else _cut(text, limit, refused)


def shown_line(text: str, limit: int | None = MAX_FIELD_CHARS) -> str:
    """A single-line field fit to draw: every refused character, newline and tab
    escaped; at most ``limit`` characters (None: no bound), cut with ``…``."""
    if (limit is None or len(text) <= limit) and text.isprintable():  # nothing to do
        return text
    return _line(text, limit, REFUSED_IN_LINE)


def shown_text(text: str, line_limit: int = MAX_LINE_CHARS) -> str:
    """Multi-line text fit to draw: newlines and tabs kept, every other refused character
    escaped; each line at most ``line_limit`` characters, cut with ``…``."""
    if len(text) <= line_limit and REFUSED_IN_TEXT.search(text) is None:
        return text
    return "\n".join(_line(line, line_limit, REFUSED_IN_TEXT) for line in text.split("\n"))


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def shown_json(text: str) -> str:
    """A JSON document (as ``json.dumps`` writes it) fit to draw: each refused character
    in its strings written as a JSON escape (``\\u009b``), so it parses to the same value.
    Outside strings such a document has none (only ASCII punctuation, spaces, newlines)."""
    if REFUSED_IN_TEXT.search(text) is None:
        return text
    return REFUSED_IN_TEXT.sub(_json_escape, text)
