"""The test-host library itself (tests/netns.py): hosts reach each other over the LAN and
not once cut off; teardown deletes exactly the namespaces it made, even after a failure;
where namespaces cannot be made the tests skip with the reason, and under CI they fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.netns import exclusive, hosts, require_netns
from tests.processes import ROOT, wait_for

pytestmark = [pytest.mark.cross_host, pytest.mark.timeout(60)]

#: One TCP connection from a host to ADDRESS:PORT, 1 s at most: prints ok or the error.
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
    print("ok")
except OSError as error:
    print(type(error).__name__)
"""


def namespaces() -> set[str]:
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=True
    )
    return {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}


def test_hosts_reach_each_other_until_one_is_cut_off() -> None:
    with hosts("server", "client") as lan:
        server, client = lan["server"], lan["client"]
        listener = subprocess.Popen(
            server.command(sys.executable, "-m", "http.server", "--bind", server.address, "8000"),
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:

            def connect(address: str) -> str:
                done = subprocess.run(
                    client.command(sys.executable, "-c", CONNECT, address, "8000"),
                    capture_output=True, text=True, timeout=30, check=False,
                )  # fmt: skip
                return done.stdout.strip()

            wait_for(lambda: connect(server.address) == "ok", timeout=30)  # it listens
            assert connect("127.0.0.1") == "ConnectionRefusedError"  # its own loopback, up
            server.cut()
            assert connect(server.address) == "TimeoutError"  # no reset: silence
            server.restore()
            assert connect(server.address) == "ok"
        finally:
            listener.kill()
            listener.wait(timeout=10)


def test_teardown_deletes_exactly_its_namespaces_even_after_a_failure() -> None:
    require_netns()
    with exclusive():  # no other test makes or deletes hosts between the two lists
        before = namespaces()
        made: set[str] = set()
        with pytest.raises(RuntimeError, match="a failing test"), hosts("a", "b") as lan:
            made = {host.netns for host in lan.values()} | {lan["a"].lan_netns}
            assert made <= namespaces()
            raise RuntimeError("a failing test")
        assert len(made) == 3
        assert namespaces() == before  # others' namespaces (a parallel run) are left alone


def test_test_hosts_are_made_one_set_at_a_time() -> None:
    """Another process that wants to make hosts waits while this one holds the lock, and
    gets it once this one lets go (or another test's hosts are gone: bounded)."""
    probe = (
        "import sys; from tests.netns import exclusive\n"
        "try:\n    with exclusive(timeout_s=float(sys.argv[1])): print('got it')\n"
        "except TimeoutError: print('waited')\n"
    )

    def other(timeout_s: float) -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe, str(timeout_s)], cwd=ROOT, capture_output=True,
            text=True, timeout=timeout_s + 30, check=True,
        )  # fmt: skip
        return done.stdout.strip()

    with exclusive(), exclusive():  # reentrant in one process
        assert other(0.3) == "waited"
    assert other(120) == "got it"


def test_without_ip_the_tests_skip_with_the_reason_but_fail_under_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no `ip`
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no `ip` command"):
        require_netns()
    assert "skipping the cross-host tests: no `ip` command" in capsys.readouterr().out
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run the cross-host tests"):
        require_netns()
