"""Record to replay: turn a captured live run into a hashed recording.

    python -m producer.convert_capture RUN_DIR OUT_DIR

Reads RUN_DIR/manifest.json and, for every development case whose call
finished with STOP, re-parses the raw SSE bytes it captured into the provider's
text events, with the live source's own loop (``protocol.ProviderStream``: the
strict parser, the lab's adapter). A run in which no development case finished
with STOP is refused (exit 2): there would be nothing to replay. Writes
OUT_DIR/recording.json in the recording layout (the case's verified trace events from the base
recording, the reply as the joined text, and ``metadata.provider.events`` so the
recording source replays the provider's own event boundaries) and
OUT_DIR/manifest.json, which pins the new file's SHA-256. Serve it with

    python -m producer --recording OUT_DIR/recording.json \\
        --recording-sha256 "$(jq -r .recording_sha256 OUT_DIR/manifest.json)"

Live once, replay forever, verified. OUT_DIR must not exist yet.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from replywire.producer.sources.gemini.protocol import frames_from_sse
from replywire.runtime.logs import configure_logging
from replywire.runtime.recording_file import DEFAULT_RECORDING_PATH, load_recording
from replywire.shared.errors import ReplywireError
from replywire.shared.recording import Recording

FORMAT = "replywire-recording/1"


class NothingToConvert(ValueError):
    """No development case of the run finished with STOP: there is no reply to replay."""


def provider_texts(
    raw: bytes, binding_sha256: str
) -> tuple[list[str], str | None, dict[str, object] | None]:
    """The captured body through the live source's own loop (``protocol.frames_from_sse``)."""
    _, stream = frames_from_sse([raw], binding_sha256)
    adapter = stream.adapter
    # An event after the finish ended the live RPC: that call is not a reply either.
    finish = adapter.finish_reason if stream.abort is None else None
    return adapter.texts, finish, adapter.usage


def convert(run_dir: Path, out_dir: Path, base: Recording) -> dict[str, Any]:
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    responses: dict[str, Any] = {}
    cases = []
    skipped: list[str] = []
    for call in manifest["calls"]:
        case_id = call["case_id"]
        if case_id not in base.case_ids or case_id in responses:
            continue
        record = json.loads((run_dir / call["file"]).read_text(encoding="utf-8"))
        raw = (run_dir / "requests" / record["sse_file"]).read_bytes()
        case = base.case(case_id)
        texts, finish, usage = provider_texts(raw, case.binding_sha256)
        if finish != "STOP" or not texts:
            skipped.append(f"{case_id} ({call['file']}): finish {finish or 'never reported'}")
            continue
        base_entry = base.raw_entry(case_id)
        responses[case_id] = [
            {
                "metadata": {
                    "case_id": case_id,
                    "request_sha256": case.request_sha256,
                    "raw_message": {"role": "assistant", "content": "".join(texts)},
                    "trace": base_entry["metadata"]["trace"],
                    "provider": {
                        "model": manifest["model"],
                        "provider_request_sha256": record["provider_request_sha256"],
                        "events": texts,
                        "finish_reason": finish,
                        "usage": usage,
                        "captured_file": call["file"],
                        "sse_sha256": hashlib.sha256(raw).hexdigest(),
                    },
                }
            }
        ]
        cases.append({"case_id": case_id, "provider_events": len(texts), "file": call["file"]})
    if not cases:
        # A recording with no case would convert "successfully" and then refuse every replay.
        raise NothingToConvert(
            f"no development case in {run_dir} finished with STOP, nothing to replay"
            + (f": {'; '.join(skipped)}" if skipped else " (no development case was captured)")
        )
    document = {
        "format": FORMAT,
        "provenance": f"Converted from the captured live run {run_dir.name} ({manifest['model']}).",
        "responses": responses,
    }
    raw_recording = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    out_dir.mkdir(parents=True)
    (out_dir / "recording.json").write_bytes(raw_recording)
    summary = {
        "recording_sha256": hashlib.sha256(raw_recording).hexdigest(),
        "run_manifest_sha256": hashlib.sha256((run_dir / "manifest.json").read_bytes()).hexdigest(),
        "model": manifest["model"],
        "cases": cases,
    }
    (out_dir / "manifest.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--recording", type=Path, default=DEFAULT_RECORDING_PATH)
    args = parser.parse_args(argv)
    # The provider's protocol warnings go to stderr; stdout is the summary.
    configure_logging("producer", log_format="json", level="warning")
    if args.out_dir.exists():
        print(f"convert_capture: refusing to overwrite {args.out_dir}", file=sys.stderr)
        return 2
    try:
        summary = convert(args.run_dir, args.out_dir, load_recording(args.recording))
    except (OSError, ValueError, KeyError, ReplywireError) as error:
        print(f"convert_capture: {error}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0
