"""Gemini's own values as registered codes: a ``finishReason`` other than STOP, and the
``status`` of an error object in the stream, each to its code.

The codes are the registry's (``shared.reasons.PROVIDER_FINISH_CODES``,
``PROVIDER_ERROR_CODES``): each is ``provider_finish_<VALUE>`` / ``provider_error_<STATUS>``,
so a value's code is found by its spelling, exactly (``max_tokens`` is not ``MAX_TOKENS``).
A value not here is ``provider_finish_unregistered`` / ``provider_error_unregistered``
(``producer.sources.gemini.protocol``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from replywire.shared.reasons import (
    PROVIDER_ERROR_CODES,
    PROVIDER_FINISH_CODES,
    Reason,
    provider_value,
)

#: A finishReason value (other than STOP) -> its code.
PROVIDER_FINISHES: Final[Mapping[str, Reason]] = {
    provider_value(reason): reason for reason in PROVIDER_FINISH_CODES
}
#: An error object's ``status`` (a ``google.rpc.Code`` name other than OK) -> its code.
PROVIDER_ERROR_STATUSES: Final[Mapping[str, Reason]] = {
    provider_value(reason): reason for reason in PROVIDER_ERROR_CODES
}
