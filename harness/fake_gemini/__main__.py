"""``python -m harness.fake_gemini``: the fake Gemini server as a process of its own.

``python -m harness.fake_gemini --port 0 [--api-key KEY] [--ready-file F]`` (``--host
ADDRESS --tls-cert C --tls-key K`` to serve HTTPS on another test host) prints
``listening on 127.0.0.1:PORT`` (flushed; and writes ``HOST:PORT`` to the ready file,
atomically), serves until SIGTERM/SIGINT and answers ``GET /_fake/log`` with
:attr:`~harness.fake_gemini.server.FakeGemini.log` as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.fake_gemini.server import FakeGemini, Pacing
from replywire.producer.files import write_atomically


async def _serve(args: argparse.Namespace) -> int:
    fake = FakeGemini(
        api_key=args.api_key,
        google_auth_errors=args.google_auth_errors,
        pacing=Pacing(
            drip_delay=args.drip_delay_s,
            event_delay=args.event_delay_s,
            start_delay=args.start_delay_s,
        ),
    )
    tls = None
    if args.tls_cert is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    port = await fake.start(args.host, args.port, tls)
    print(f"listening on {args.host}:{port}", flush=True)
    if args.ready_file is not None:
        write_atomically(args.ready_file, f"{args.host}:{port}".encode())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await fake.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.fake_gemini",
        description="A fake Gemini streaming server on loopback: try the gemini source, "
        "--record and record-to-replay without a key (point --gemini-base-url at it).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--api-key", default="test-key", help="the key it accepts (GEMINI_API_KEY of the producer)"
    )
    parser.add_argument(
        "--ready-file",
        type=Path,
        default=None,
        help="once listening, write HOST:PORT to this file (atomically)",
    )
    parser.add_argument(
        "--tls-cert", type=Path, default=None, help="serve HTTPS with this certificate"
    )
    parser.add_argument("--tls-key", type=Path, default=None, help="... and this key")
    parser.add_argument(
        "--google-auth-errors",
        action="store_true",
        help="answer a missing key with 403 and a wrong key with 400 API_KEY_INVALID (as Google)",
    )
    parser.add_argument(
        "--drip-delay-s",
        type=float,
        default=Pacing().drip_delay,
        help="seconds between the 8-byte pieces of a fake-slow-drip reply",
    )
    parser.add_argument(
        "--event-delay-s",
        type=float,
        default=Pacing().event_delay,
        help="seconds after each event of a reply (but fake-slow-drip's, paced by its pieces)",
    )
    parser.add_argument(
        "--start-delay-s",
        type=float,
        default=Pacing().start_delay,
        help="seconds fake-slow-start holds the response after reading the request",
    )
    return asyncio.run(_serve(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
