"""Canonical JSON digests and strict JSON parsing, exactly as the lab defines them."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    """The lab's canonical form: sorted keys, compact separators, UTF-8, no ASCII escaping."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def digest(value: Any) -> str:
    """SHA-256 hex of the canonical JSON of ``value`` (the lab's ``digest``)."""
    return canonical_digest(canonical_json(value))


def canonical_digest(canonical: bytes) -> str:
    """``digest(value)`` from ``canonical_json(value)`` already made (no second encoding)."""
    return hashlib.sha256(canonical).hexdigest()


def _unique_pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    # dict() keeps the last of equal keys: fewer keys than pairs means a duplicate.
    result = dict(items)
    if len(result) != len(items):
        raise ValueError("duplicate_json_key")
    return result


def _reject_constant(value: str) -> Any:
    raise ValueError("invalid_json_constant")


#: Built once: ``json.loads`` with any hook builds a new decoder and scanner per call.
_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_reject_constant)
_SCAN_ONCE = _STRICT_DECODER.scan_once  # type: ignore[attr-defined]  # set in __init__


def strict_json(text: str | bytes) -> Any:
    """Parse JSON, refusing duplicate object keys and NaN / Infinity (the lab's ``strict_json``).

    Raises ``ValueError`` (``json.JSONDecodeError`` is one) or ``RecursionError``.
    """
    if isinstance(text, bytes | bytearray):
        # What json.loads does with bytes: UTF-8, -16 or -32, told by the first bytes.
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    elif not isinstance(text, str):
        raise TypeError(f"the JSON object must be str or bytes, not {type(text).__name__}")
    elif text.startswith("\ufeff"):  # as json.loads refuses a str that starts with a BOM
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    # The common case in one scanner call: a value from the first character to the last.
    # Anything else (surrounding whitespace, extra data, no value) takes decode()'s path,
    # which accepts or refuses it exactly as json.loads does.
    try:
        value, end = _SCAN_ONCE(text, 0)
    except StopIteration:
        return _STRICT_DECODER.decode(text)
    if end != len(text):
        return _STRICT_DECODER.decode(text)
    return value


def within_depth(value: Any, max_depth: int) -> bool:
    """True if no array or object in ``value`` is nested deeper than ``max_depth`` (iterative:
    a deep value cannot exhaust the stack here, as it would in ``digest()``)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                return False
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return True


def bounded_json(text: str | bytes, *, max_bytes: int, max_depth: int) -> Any:
    """``strict_json`` for input from outside: at most ``max_bytes`` (UTF-8) and ``max_depth``
    levels of arrays and objects. Raises ``ValueError`` past either bound."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8"))
    if size > max_bytes:
        raise ValueError(f"over {max_bytes} bytes")
    try:
        value = strict_json(text)
    except RecursionError as error:
        raise ValueError(f"nested deeper than {max_depth}") from error
    if not within_depth(value, max_depth):
        raise ValueError(f"nested deeper than {max_depth}")
    return value
