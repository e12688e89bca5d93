"""Wire formats: encoders and sans-IO decoders for length-prefixed frames and NDJSON."""

from replywire.native import package_path

__path__ = package_path(__path__, __name__)

from replywire.shared.wire.base import (
    DEFAULT_WIRES,
    NEED_DATA,
    FrameDecoder,
    Integrity,
    NeedData,
    WireCodec,
    WireFormat,
)
from replywire.shared.wire.lp import LengthPrefixedCodec
from replywire.shared.wire.ndjson import NdjsonCodec

_CODECS: dict[WireFormat, WireCodec] = {
    WireFormat.LENGTH_PREFIXED: LengthPrefixedCodec(),
    WireFormat.NDJSON: NdjsonCodec(WireFormat.NDJSON),
    WireFormat.NDJSON_LAB: NdjsonCodec(WireFormat.NDJSON_LAB),
}


def codec_for(wire: WireFormat) -> WireCodec:
    return _CODECS[wire]


__all__ = [
    "DEFAULT_WIRES",
    "NEED_DATA",
    "FrameDecoder",
    "Integrity",
    "NeedData",
    "WireCodec",
    "WireFormat",
    "codec_for",
]
