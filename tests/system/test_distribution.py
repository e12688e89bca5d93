"""replywire as a package: the sdist and the wheel built from the tree a clean clone has,
each installed into a fresh virtual environment, and the installed commands run from a
folder that is not the repository (docs/operations.md#installing-replywire).

The tree is copied as ``git`` sees it (tracked and new files, not what ``.gitignore``
ignores), so the build starts, as ``pip install git+…`` does, without the generated protobuf
code or a compiled build. In it, ``python -m build`` makes the sdist and, from the sdist, the
wheel (the commands the docs show). Three fresh virtual environments: one installs the
wheel, one the sdist (pip builds its wheel from it), one runs ``pip install .`` in the tree
(pip's in-tree build, what ``pip install git+…`` does). The commands run from a folder that
holds ``runtime/``, ``shared/``, ``producer/`` ... packages of its own that fail when
imported: the installed replywire never reaches them.

It is one test, so that one worker builds once (a module's fixture is built again on each
worker that runs one of its tests). Building and installing use the package index (as
``make setup`` does): the build's own requirements and replywire's dependencies, at the
versions ``requirements.lock`` pins (``pip install .`` as the docs show it, unconstrained).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from replywire.children import read_listening_port, stop_process
from tests.tree import ignore_patterns, is_ignored

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.1.0"
COMMANDS = ("replywire", "replywire-producer", "replywire-consumer")
#: What the wheel may hold of fixtures/: the recordings the commands serve.
RECORDINGS = ("chat-recording.json", "recording.json", "text-recording.json")
#: Folders a user may have where they run a command: each a package that fails on import.
DECOYS = ("runtime", "shared", "producer", "consumer", "traces", "native")
#: The commands docs/operations.md#installing-replywire shows (tests/system/test_readme.py).
INSTALL, BUILD = "pip install .", "python -m build"
REPLAY, DEMO = "replywire-consumer replay --case replace-file", "replywire demo"
#: Each command's help, asked of every installation.
HELP = (
    ("replywire-producer", "--help"),
    ("replywire-consumer", "--help"),
    ("replywire-consumer", "stream", "--help"),
    ("replywire-consumer", "replay", "--help"),
    ("replywire", "--help"),
    ("replywire", "demo", "--help"),
    ("replywire", "trace", "--help"),
)
BUILD_TIMEOUT_S = 300
RUN_TIMEOUT_S = 120

pytestmark = pytest.mark.timeout(900)


def clean_env() -> dict[str, str]:
    """This environment without the repository's virtual environment or Python path."""
    dropped = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "REPLYWIRE_PURE"}
    return {k: v for k, v in os.environ.items() if k not in dropped and "COVERAGE" not in k}


def run(
    command: list[str], cwd: Path, timeout: float = RUN_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip


def checked(command: list[str], cwd: Path, timeout: float = BUILD_TIMEOUT_S) -> str:
    done = run(command, cwd, timeout)
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def copy_clean_tree(target: Path) -> list[str]:
    """The files a clean clone has (links kept as links), copied to ``target``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    copied = []
    for name in filter(None, listed):
        source = ROOT / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted, not yet committed
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            destination.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, destination)
        copied.append(name)
    return copied


def files_under(folder: Path) -> set[str]:
    return {
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and not any(part.is_symlink() for part in (path, *path.parents))
    }


@dataclass(frozen=True)
class Built:
    tree: Path
    sdist: Path
    wheel: Path
    before: set[str]  # the tree's files before any build

    def left_behind(self) -> set[str]:
        """What the builds so far wrote in the tree and git would not ignore."""
        patterns = ignore_patterns()
        return {n for n in files_under(self.tree) - self.before if not is_ignored(n, patterns)}


@dataclass(frozen=True)
class Installed:
    how: str
    bin: Path
    site_packages: Path
    place: Path  # where the commands run: not the repository, with decoy packages
    left_behind: set[str]  # what the builds wrote in the tree, by then, that git would keep

    def command(self, name: str, *args: str) -> list[str]:
        return [str(self.bin / name), *args]


def build(base: Path) -> Built:
    """The clean tree copied under ``base``, and the docs' ``python -m build`` run in it."""
    tree = base / "clone"
    copy_clean_tree(tree)
    before = files_under(tree)
    checked([sys.executable, *BUILD.split()[1:]], tree)
    dist = tree / "dist"
    return Built(
        tree, dist / f"replywire-{VERSION}.tar.gz",
        dist / f"replywire-{VERSION}-py3-none-any.whl", before,
    )  # fmt: skip


def install(built: Built, how: str, base: Path) -> Installed:
    """A fresh virtual environment with replywire installed ``how`` (``wheel``, ``sdist``,
    or ``tree``: the docs' ``pip install .`` in the tree), and a folder with decoys."""
    base = base / how
    venv = base / "venv"
    checked([sys.executable, "-m", "venv", str(venv)], built.tree.parent)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    if how == "tree":
        checked([*pip, *INSTALL.split()[2:]], built.tree)
    else:
        artifact = built.wheel if how == "wheel" else built.sdist
        checked([*pip, "-c", str(ROOT / "requirements.lock"), str(artifact)], base)
    place = base / "elsewhere"
    for decoy in DECOYS:
        (place / decoy).mkdir(parents=True)
        (place / decoy / "__init__.py").write_text(f"raise ImportError('the user\\'s {decoy}/')\n")
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    return Installed(how, venv / "bin", site, place, built.left_behind())


def test_built_from_a_clean_tree_and_installed_three_ways_it_runs_from_any_folder(
    tmp_path: Path,
) -> None:
    built = build(tmp_path)
    check_the_wheel(built)
    check_the_sdist(built)
    for how in ("wheel", "sdist", "tree"):
        installed = install(built, how, tmp_path)
        check_site_packages(installed)
        for command in HELP:
            check_help(installed, command)
        check_python_m(installed)
        with producer(installed) as port:
            check_stream_replay_and_trace(installed, port)
        check_the_hint(installed)
        check_the_docs_commands(installed)
        assert installed.left_behind == set(), how
    assert (built.tree / "build").is_dir()  # pip's in-tree build wrote it; git ignores it


def check_the_wheel(built: Built) -> None:
    names = zipfile.ZipFile(built.wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"replywire", f"replywire-{VERSION}.dist-info"}
    packages = {n.split("/")[1] for n in names if n.startswith("replywire/") and n.count("/") > 1}
    assert packages == {"shared", "runtime", "producer", "consumer", "traces", "native", "fixtures"}
    assert sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("replywire/fixtures/")) == [
        *RECORDINGS
    ]
    generated = {n for n in names if n.startswith("replywire/shared/pb/replywire_pb2")}
    assert generated == {
        f"replywire/shared/pb/replywire_pb2{suffix}"
        for suffix in (".py", ".pyi", "_grpc.py", "_grpc.pyi")
    }
    scripts = zipfile.ZipFile(built.wheel).read(f"replywire-{VERSION}.dist-info/entry_points.txt")
    assert scripts.decode().split() == [
        "[console_scripts]",
        "replywire", "=", "replywire.commands:replywire",
        "replywire-consumer", "=", "replywire.commands:consumer",
        "replywire-producer", "=", "replywire.commands:producer",
    ]  # fmt: skip


def check_the_sdist(built: Built) -> None:
    with tarfile.open(built.sdist) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"protos/shared/pb/replywire.proto", "protos/generate.py", "setup.py"} <= names
    assert not {n for n in names if "_pb2" in n}, "the generated code is made by the build"
    assert not {n for n in names if n.split("/")[0] in ("tests", "bench", "harness", "tools")}


def check_site_packages(installed: Installed) -> None:
    """One package and its metadata in ``site-packages``, three commands in ``bin``."""
    record = next(installed.site_packages.glob("replywire-*.dist-info")) / "RECORD"
    paths = [line.split(",")[0] for line in record.read_text().splitlines()]
    tops = {p.split("/")[0] for p in paths if not p.startswith("..")}
    assert tops == {"replywire", f"replywire-{VERSION}.dist-info"}, installed.how
    scripts = sorted(Path(p).name for p in paths if p.startswith(".."))
    assert scripts == sorted(COMMANDS), installed.how


def check_help(installed: Installed, command: tuple[str, ...]) -> None:
    done = run(installed.command(*command), installed.place)
    assert (done.returncode, done.stderr) == (0, ""), (installed.how, command)
    usage = f"usage: {' '.join(c for c in command if c != '--help')}"
    assert done.stdout.startswith(usage), (installed.how, done.stdout[:200])


def check_python_m(installed: Installed) -> None:
    """``python -m`` puts the folder first on the path: the user's packages are passed by."""
    python = str(installed.bin / "python")
    done = run([python, "-m", "replywire.consumer", "replay", "--case", "replace-file"],
               installed.place)  # fmt: skip
    assert done.returncode == 0, (installed.how, done.stderr)
    assert json.loads(done.stdout)["status"] == "complete"


@contextmanager
def producer(installed: Installed) -> Iterator[int]:
    """An installed producer, started from the user's folder; its port."""
    process = subprocess.Popen(
        installed.command("replywire-producer", "--port", "0", "--allow-faults",
                          "--trace-file", "producer.jsonl"),
        cwd=installed.place, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        port = read_listening_port(process)
        assert port is not None, f"the producer installed from the {installed.how} did not start"
        yield port
    finally:
        stop_process(process)


def check_stream_replay_and_trace(installed: Installed, port: int) -> None:
    place, stream_id = installed.place, f"installed-{installed.how}"
    replay = run(installed.command("replywire-consumer", "replay", "--case", "replace-file",
                                   "--fault", "truncate-tail"), place)  # fmt: skip
    assert replay.returncode == 6, (installed.how, replay.stderr)
    assert json.loads(replay.stdout)["reason"] == "truncated_frame"
    stream = run(installed.command(
        "replywire-consumer", "stream", "--target", f"127.0.0.1:{port}",
        "--case", "replace-file", "--stream-id", stream_id,
        "--result", "result.json", "--trace-file", "consumer.jsonl",
    ), place)  # fmt: skip
    assert stream.returncode == 0, (installed.how, stream.stderr)
    assert json.loads((place / "result.json").read_text())["status"] == "complete"
    trace = run(installed.command(
        "replywire", "trace", "producer.jsonl", "consumer.jsonl",
        "--stream", stream_id, "--out", "timeline.html",
    ), place)  # fmt: skip
    assert trace.returncode == 0, (installed.how, trace.stderr)
    assert "complete" in trace.stdout
    assert (place / "timeline.html").read_text().startswith("<!doctype html>")


def check_the_hint(installed: Installed) -> None:
    """No producer at the target: the hint says how to start one with what is installed."""
    done = run(installed.command("replywire-consumer", "stream", "--target", "127.0.0.1:9",
                                 "--case", "replace-file", "--deadline-s", "5", "--view"),
               installed.place)  # fmt: skip
    assert done.returncode == 5, (installed.how, done.stderr)
    assert "start one with" in done.stdout
    assert "`replywire-producer --port 9`" in done.stdout
    assert "make " not in done.stdout and ".venv" not in done.stdout


def check_the_docs_commands(installed: Installed) -> None:
    """docs/operations.md#installing-replywire's, as written, with the environment's ``bin``
    first on the ``PATH``; the demo says how to look again with the installed command."""
    env = {**clean_env(), "PATH": f"{installed.bin}{os.pathsep}{os.environ['PATH']}"}
    replay = subprocess.run(
        ["bash", "-c", REPLAY], cwd=installed.place, env=env, capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert replay.returncode == 0, (installed.how, replay.stderr)
    assert json.loads(replay.stdout)["status"] == "complete"
    done = subprocess.run(
        ["bash", "-c", DEMO], cwd=installed.place, env=env, capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (installed.how, done.stderr)
    assert "\n  replywire trace " in done.stdout
    assert "\n  replywire join-traces " in done.stdout
    assert ".venv" not in done.stdout and "make " not in done.stdout
