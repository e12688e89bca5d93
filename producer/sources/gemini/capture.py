"""Evidence of every live call: the request, the raw SSE bytes, timings, usage, cost.

``--record DIR`` (which must not exist yet, or be empty: a run is never
overwritten) receives, per provider call, ``requests/request-NNN.json`` and the
exact bytes of the response body in ``requests/request-NNN.sse``, and a run
``manifest.json`` that links, per case, the historic request hash and the fresh
provider-request hash and records whether the supplied user context is
identical (as the lab's run manifest does). Files are written atomically, and
every registered secret (``runtime.logs.register_secret``: the API key) is
replaced by ``[redacted]`` in their bytes first, the raw response body
included: a provider's error body that echoes the key never reaches the disk.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from replywire.producer.files import write_atomically
from replywire.producer.sources.gemini.protocol import user_text
from replywire.runtime.logs import scrub_bytes
from replywire.shared.digest import digest, strict_json

FORMAT: Final = "replywire-gemini-run/1"
#: The most response bytes one call's capture keeps (the consumer's limit is far below it).
MAX_CAPTURE_BYTES: Final = 4 << 20


def user_context_identical(binding: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """The fresh request carries the binding's user turn, and its context is the selected one
    (a text binding's messages are sent as they are: nothing to compare)."""
    if "selected_context" not in binding:
        return False
    sent = body["contents"][0]["parts"][0]["text"]
    if sent != user_text(binding):
        return False
    supplied = strict_json(sent)["context"]
    selected = [
        {"id": row["source_id"], "text": row["text"]} for row in binding["selected_context"]
    ]
    return bool(supplied == selected)


class CallCapture:
    def __init__(self, run: RunCapture, index: int, meta: dict[str, Any]) -> None:
        self.run = run
        self.name = f"request-{index:03d}"
        self.meta = meta
        self.started = time.monotonic()
        self.receipts: list[dict[str, float | int]] = []
        self.raw = bytearray()
        self.truncated = False

    def received(self, data: bytes) -> None:
        """One network read of the response body, with its monotonic offset."""
        offset_ms = round((time.monotonic() - self.started) * 1000, 3)
        self.receipts.append({"offset_ms": offset_ms, "bytes": len(data)})
        room = MAX_CAPTURE_BYTES - len(self.raw)
        self.raw += data[:room]
        self.truncated = self.truncated or len(data) > room

    async def finish(self, **outcome: Any) -> None:
        raw = scrub_bytes(bytes(self.raw), cut=self.truncated)
        record = {
            **self.meta,
            **outcome,
            "sse_file": f"{self.name}.sse",
            "sse_bytes": len(raw),
            "sse_truncated": self.truncated,
            # The receipts count the bytes as received; a redaction changes the file's size.
            "sse_redacted": raw != self.raw,
            "receipts": self.receipts,
            "elapsed_ms": round((time.monotonic() - self.started) * 1000, 3),
        }
        await self.run.write_call(self.name, record, raw)


class RunCapture:
    def __init__(self, directory: Path, *, model: str) -> None:
        if directory.exists() and any(directory.iterdir()):
            raise FileExistsError(f"refusing to overwrite the run in {directory}")
        (directory / "requests").mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.model = model
        self._index = 0
        self._calls: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()
        self._write_manifest()

    def start(
        self, *, binding: Mapping[str, Any], body: Mapping[str, Any], **meta: Any
    ) -> CallCapture:
        self._index += 1
        return CallCapture(
            self,
            self._index,
            {
                "model": self.model,
                "case_id": binding["case_id"],
                "historic_request_sha256": binding["request_sha256"],
                "binding_sha256": digest(binding),
                "provider_request_sha256": digest(body),
                "user_context_identical": user_context_identical(binding, body),
                "request_body": body,
                **meta,
            },
        )

    async def write_call(self, name: str, record: dict[str, Any], raw: bytes) -> None:
        async with self._lock:
            requests = self.directory / "requests"
            write_atomically(requests / f"{name}.sse", scrub_bytes(raw))
            text = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
            write_atomically(requests / f"{name}.json", scrub_bytes(text.encode("utf-8")))
            self._calls.append(
                {
                    "file": f"requests/{name}.json",
                    **{
                        key: record.get(key)
                        for key in (
                            "case_id",
                            "historic_request_sha256",
                            "provider_request_sha256",
                            "binding_sha256",
                            "user_context_identical",
                            "outcome",
                            "finish_reason",
                            "estimated_usd",
                        )
                    },
                }
            )
            self._write_manifest()

    def _write_manifest(self) -> None:
        manifest = {"format": FORMAT, "model": self.model, "calls": self._calls}
        text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
        write_atomically(self.directory / "manifest.json", scrub_bytes(text.encode("utf-8")))
