"""Trace timestamps (ISO 8601, as ``runtime/logs.py`` writes them) as integer microseconds
since the epoch, parsed by hand: pure, no clock, no time zone database."""

from __future__ import annotations

import re
from typing import Final

_TIMESTAMP: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$"
)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def microseconds(timestamp: object) -> int | None:
    """An ISO 8601 timestamp as integer microseconds since the epoch (None: not one)."""
    if not isinstance(timestamp, str):
        return None
    match = _TIMESTAMP.match(timestamp)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction, zone = match.group(7) or "", match.group(8) or "Z"
    micros = int((fraction + "000000")[:6])
    offset = 0
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    return (seconds - offset) * 1_000_000 + micros
