"""Test hosts: Linux network namespaces on one private LAN, for cross-host tests.

``hosts("redis", "a", "b", "consumer")`` makes one namespace per host and a "lan"
namespace that holds a bridge (the switch); each host has one link, ``eth0`` (a veth
pair: ``eth0`` in the host, ``pN`` on the bridge), an address on the private subnet
10.77.0.0/24 and loopback up. Everything is made inside the new namespaces, so the
machine's own network is never touched and the same subnet in two runs at once never
collides. Namespace names carry the pid and a random token: parallel runs and
leftovers of a killed run never clash. Teardown deletes exactly the namespaces it made,
by name, even when the test failed (a namespace goes with its links and bridge).

The machine's list of namespaces is one for every process, so test hosts are made one
set at a time: :func:`exclusive` holds a machine-wide lock (a file lock under the
temporary directory) while they exist, and a test that compares that list before and
after holds it throughout. Under pytest-xdist, a worker that reaches a cross-host test
while another worker runs one waits for it (bounded); the other workers go on.

A host runs a real process through :meth:`Host.command` (``ip netns exec NAME ...``,
the prefix tests/processes.py and tests/redis_server.py take). :meth:`Host.cut` pulls
the host's cable at the switch (``ip link set pN down`` in the lan namespace): its
processes keep running, and nobody gets a reset: packets just stop.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and ``ip`` (iproute2). Without them the test
is skipped with the reason printed; under CI (``CI`` set) that is a failure instead.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

SUBNET = "10.77.0"
PREFIX_LENGTH = 24
IP_TIMEOUT_S = 10.0
#: Host addresses start at .2 (.1 is left free, as for a gateway).
FIRST_HOST = 2
MAX_HOSTS = 200


class NetnsError(RuntimeError):
    """An ``ip`` command failed: its stderr says why."""


def ip(*args: str) -> None:
    """``ip ARGS`` (bounded); a failure raises with ip's own message."""
    done = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (None: they can), found by making one."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    probe = f"rwprobe{os.getpid()}-{secrets.token_hex(3)}"
    try:
        ip("netns", "add", probe)
    except (NetnsError, OSError, subprocess.TimeoutExpired) as error:
        return f"cannot make a network namespace: {error}"
    ip("netns", "delete", probe)
    return None


def require_netns() -> None:
    """Skip (printing why) where namespaces cannot be made; fail instead under CI."""
    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the cross-host tests, but: {reason}")
    print(f"skipping the cross-host tests: {reason}")
    pytest.skip(reason)


@dataclass(frozen=True)
class Host:
    """One test host: a namespace with one link to the lan."""

    name: str
    netns: str
    address: str
    lan_netns: str
    port_name: str  # its end of the cable on the bridge, in the lan namespace

    def command(self, *argv: str) -> list[str]:
        """``argv`` run on this host."""
        return [*self.prefix, *argv]

    @property
    def prefix(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.netns)

    def cut(self) -> None:
        """Pull the cable: nothing reaches the host or leaves it, and nobody is told."""
        ip("-n", self.lan_netns, "link", "set", self.port_name, "down")

    def restore(self) -> None:
        ip("-n", self.lan_netns, "link", "set", self.port_name, "up")


#: The machine-wide lock on making test hosts (one file for every run on this machine).
LOCK_PATH = Path(tempfile.gettempdir()) / "replywire-test-hosts.lock"
#: How long a test waits for another's hosts to go: every cross-host test takes far less.
LOCK_TIMEOUT_S = 600.0
_held = 0  # how deep this process is in exclusive(): the lock is taken once


@contextmanager
def exclusive(timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """While inside, no other process makes or deletes test hosts (reentrant)."""
    global _held  # noqa: PLW0603 - one lock per process, whoever nests it
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    with LOCK_PATH.open("a") as file:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{LOCK_PATH} still held after {timeout_s} s") from None
                time.sleep(0.05)
        _held = 1
        try:
            yield
        finally:
            _held = 0
            fcntl.flock(file, fcntl.LOCK_UN)


@contextmanager
def hosts(*names: str) -> Iterator[dict[str, Host]]:
    """Hosts on one LAN (skipped where they cannot be made), by name; deleted after."""
    require_netns()
    if len(set(names)) != len(names) or not 0 < len(names) <= MAX_HOSTS:
        raise ValueError(f"1 to {MAX_HOSTS} distinct host names: {names}")
    with exclusive(), _made_hosts(names) as made:
        yield made


@contextmanager
def _made_hosts(names: Sequence[str]) -> Iterator[dict[str, Host]]:
    run = f"rw{os.getpid()}-{secrets.token_hex(3)}"
    made: list[str] = []
    try:
        lan = _namespace(f"{run}-lan", made)
        ip("-n", lan, "link", "add", "br0", "type", "bridge")
        ip("-n", lan, "link", "set", "br0", "up")
        yield {
            name: _host(run, lan, name, FIRST_HOST + index, made)
            for index, name in enumerate(names)
        }
    finally:
        _delete(made)


def _namespace(name: str, made: list[str]) -> str:
    ip("netns", "add", name)
    made.append(name)
    ip("-n", name, "link", "set", "lo", "up")
    return name


def _host(run: str, lan: str, name: str, number: int, made: list[str]) -> Host:
    netns = _namespace(f"{run}-{name}", made)
    port = f"p{number}"
    address = f"{SUBNET}.{number}"
    ip("-n", lan, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns)
    ip("-n", lan, "link", "set", port, "master", "br0")
    ip("-n", lan, "link", "set", port, "up")
    ip("-n", netns, "addr", "add", f"{address}/{PREFIX_LENGTH}", "dev", "eth0")
    ip("-n", netns, "link", "set", "eth0", "up")
    return Host(name, netns, address, lan, port)


def _delete(names: Sequence[str]) -> None:
    """Delete these namespaces (hosts first, the lan last); report what could not be."""
    failures = []
    for name in reversed(names):
        try:
            ip("netns", "delete", name)
        except (NetnsError, subprocess.TimeoutExpired) as error:
            failures.append(str(error))
    if failures:
        raise NetnsError("; ".join(failures))
