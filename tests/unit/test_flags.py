"""The flag tables (``runtime.flags``): each validator at and past its edges, every flag
argparse knows in the generated documentation table (none hidden, none stale), every
producer flag's environment variable (a flag on the command line wins), and usage errors
that stay one line and exit 2."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from replywire import flags as replywire_table
from replywire.consumer import flags as consumer_table
from replywire.producer import cli as producer_cli
from replywire.producer import flags as producer_table
from replywire.runtime.flags import (
    MAX_PORT,
    Count,
    Flag,
    FlagTable,
    Number,
    OneOf,
    OrNone,
    non_negative_number,
    port_number,
    positive_seconds,
    seconds_at_least,
    seconds_or_zero,
)
from replywire.runtime.logs import flush_delay_ms
from tools.docs import consumer_flags, producer_flags, replywire_flags

ACCEPTED: list[tuple[Callable[[str], Any], str, Any]] = [
    (Count("streams"), "1", 1),
    (Count("bytes"), "4194304", 4194304),
    (Count("milliseconds", 0), "0", 0),
    (positive_seconds, "0.001", 0.001),
    (positive_seconds, "1e9", 1e9),
    (seconds_or_zero, "0", 0.0),
    (seconds_or_zero, "-0", 0.0),
    (seconds_at_least(0.001, "one millisecond"), "0.001", 0.001),
    (seconds_at_least(1.0, "gRPC pings no faster"), "1", 1.0),
    (non_negative_number, "0", 0.0),
    (non_negative_number, "2", 2.0),  # a share's upper bound is its own setting's check
    (Number(0.0, inclusive=False, unit="US dollars"), "0.01", 0.01),
    (port_number, "0", 0),
    (port_number, str(MAX_PORT), MAX_PORT),
    (OrNone(port_number), "", None),
    (OrNone(Count("streams")), "3", 3),
    (OneOf(("recording", "gemini")), "gemini", "gemini"),
]


REFUSED: list[tuple[Callable[[str], Any], str, str]] = [
    (Count("streams"), "0", "must be at least 1: 0"),
    (Count("streams"), "-1", "must be at least 1: -1"),
    (Count("streams"), "1.5", "not a whole number of streams: '1.5'"),
    (Count("bytes"), "many", "not a whole number of bytes: 'many'"),
    (Count("milliseconds", 0), "-1", "must be at least 0: -1"),
    (positive_seconds, "0", "must be a finite number > 0: 0"),
    (positive_seconds, "-0.001", "must be a finite number > 0"),
    (positive_seconds, "inf", "must be a finite number > 0"),
    (positive_seconds, "nan", "must be a finite number > 0"),
    (positive_seconds, "soon", "not a number of seconds: 'soon'"),
    (seconds_or_zero, "-0.001", "must be a finite number >= 0"),
    (seconds_or_zero, "inf", "must be a finite number >= 0"),
    (seconds_or_zero, "nan", "must be a finite number >= 0"),
    (seconds_at_least(0.001, "one millisecond"), "0.0009", "must be at least 0.001"),
    (seconds_at_least(0.001, "one millisecond"), "1e400", "at least 0.001 (one millisecond)"),
    (seconds_at_least(1.0, "gRPC pings no faster"), "0.999", "(gRPC pings no faster)"),
    (non_negative_number, "-0.001", "must be a finite number >= 0"),
    (non_negative_number, "x", "not a number: 'x'"),
    (Number(0.0, inclusive=False, unit="US dollars"), "0", "must be a finite number > 0"),
    (port_number, "-1", f"a port is 0..{MAX_PORT}"),
    (port_number, str(MAX_PORT + 1), f"a port is 0..{MAX_PORT}"),
    (port_number, "http", "not a port number: 'http'"),
    (OrNone(port_number), "x", "not a port number"),
    (OneOf(("recording", "gemini")), "Gemini", "invalid choice: 'Gemini'"),
]


@pytest.mark.parametrize(("parse", "text", "value"), ACCEPTED)
def test_a_validator_accepts_its_edge(parse: Callable[[str], Any], text: str, value: Any) -> None:
    assert parse(text) == value


@pytest.mark.parametrize(("parse", "text", "message"), REFUSED)
def test_a_validator_refuses_past_its_edge(
    parse: Callable[[str], Any], text: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        parse(text)


def known_arguments(parser: argparse.ArgumentParser) -> Iterator[str]:
    """Every option string (and positional argument) argparse knows, in every command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                yield from known_arguments(command)
        elif isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue  # argparse's own: --help, --version
        elif action.option_strings:
            yield from action.option_strings
        else:
            yield str(action.metavar or action.dest)


def documented_arguments(table: str) -> set[str]:
    """The names in the first cell of every flag row (not the group headings)."""
    names = set()
    for line in table.splitlines()[2:]:
        first = line.split(" | ")[0].removeprefix("| ")
        if not first.startswith("**"):
            names |= {name.removesuffix(" …") for name in re.findall(r"`([^`]+)`", first)}
    return names


@pytest.mark.parametrize(
    ("build", "render"),
    [
        (producer_table.build_parser, producer_flags),
        (consumer_table.build_parser, consumer_flags),
        (replywire_table.build_parser, replywire_flags),
    ],
    ids=["producer", "consumer", "replywire"],
)
def test_the_generated_table_lists_every_flag_argparse_knows(
    build: Callable[[], argparse.ArgumentParser], render: Callable[[], str]
) -> None:
    known, documented = set(known_arguments(build())), documented_arguments(render())
    assert known - documented == set(), "hidden: in argparse, not in the table"
    assert documented - known == set(), "stale: in the table, not in argparse"


@pytest.mark.parametrize(
    "table", [producer_table.FLAGS, consumer_table.FLAGS, replywire_table.FLAGS]
)
def test_every_flag_has_its_own_line_for_the_table(table: FlagTable) -> None:
    for flag in table:
        assert flag.help and flag.meaning, flag.name
        assert "\n" not in flag.meaning, flag.name


def test_the_tables_are_the_same_whatever_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs show the code's defaults, never the environment's (nor a password in it)."""
    before = producer_flags(), consumer_flags()
    monkeypatch.setenv("REPLYWIRE_LEDGER", "redis://:hunter2-secret@h/0")
    monkeypatch.setenv("REPLYWIRE_PORT", "7")
    monkeypatch.setenv("REPLYWIRE_TARGET", "elsewhere:1")
    after = producer_flags(), consumer_flags()
    assert after == before
    assert "hunter2" not in "".join(after)


def another_value(flag: Flag) -> str:
    """A text this flag accepts that is not its default."""
    parse = flag.type
    if flag.choices:
        return next(choice for choice in flag.choices if choice != flag.default)
    if isinstance(parse, OrNone):
        parse = parse.parse
    if isinstance(parse, Count):
        return str(max(int(flag.default or 0), parse.minimum) + 1)
    if isinstance(parse, Number) or parse is port_number:
        return "1" if flag.default in (None, 0) or float(flag.default) != 1 else "2"
    if parse is flush_delay_ms:  # runtime.logs' own: whole ms, 0 to 1000
        return str(flag.default + 1)
    return "elsewhere"  # a text, a path, a URL


PRODUCER_VALUED = [flag for flag in producer_table.FLAGS if flag.action == "store"]


PRODUCER_SWITCHES = [flag for flag in producer_table.FLAGS if flag.action == "switch"]


@pytest.mark.parametrize("flag", PRODUCER_VALUED, ids=[flag.name for flag in PRODUCER_VALUED])
def test_a_producer_flag_reads_its_environment_variable_and_the_command_line_wins(
    flag: Flag, monkeypatch: pytest.MonkeyPatch
) -> None:
    def parse(text: str) -> Any:
        return flag.type(text) if flag.type is not None else text

    dest, variable = (
        flag.dest or flag.name[2:].replace("-", "_"),
        producer_table.FLAGS.env_name(flag),
    )
    assert variable == "REPLYWIRE_" + dest.upper()
    default = getattr(producer_table.build_parser().parse_args([]), dest)
    from_env = parse(another_value(flag))
    assert from_env != default
    monkeypatch.setenv(variable, another_value(flag))
    assert getattr(producer_table.build_parser().parse_args([]), dest) == from_env
    # The command line wins, even with an empty value where that means unset (--metrics-port '').
    given = "" if isinstance(flag.type, OrNone) else str(flag.default or "from-the-command-line")
    from_line = getattr(producer_table.build_parser().parse_args([flag.name, given]), dest)
    assert from_line == parse(given) != from_env
    monkeypatch.setenv(variable, "")  # an empty variable is as good as unset
    assert getattr(producer_table.build_parser().parse_args([]), dest) == default


@pytest.mark.parametrize("flag", PRODUCER_SWITCHES, ids=[flag.name for flag in PRODUCER_SWITCHES])
@pytest.mark.parametrize(("text", "on"), [("1", True), ("YES", True), ("0", False), ("", False)])
def test_a_producer_switch_from_the_environment(
    flag: Flag, text: str, on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(producer_table.FLAGS.env_name(flag) or "", text)
    dest = flag.name.lstrip("-").replace("-", "_")
    assert getattr(producer_table.build_parser().parse_args([]), dest) is on
    assert getattr(producer_table.build_parser().parse_args([flag.name]), dest) is True


def test_an_environment_value_goes_through_the_flag_s_validator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REPLYWIRE_SOURCE", "bogus")
    with pytest.raises(SystemExit) as exit_info:
        producer_table.build_parser().parse_args([])
    assert exit_info.value.code == 2
    assert "argument --source: invalid choice: 'bogus'" in capsys.readouterr().err
    # ... unless the command line says otherwise: the environment's value is then unused.
    assert producer_table.build_parser().parse_args(["--source", "gemini"]).source == "gemini"


def test_the_consumer_reads_no_flag_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for flag in consumer_table.FLAGS:
        assert consumer_table.FLAGS.env_name(flag) is None
    monkeypatch.setenv("REPLYWIRE_TARGET", "elsewhere:1")
    monkeypatch.setenv("REPLYWIRE_LOG_LEVEL", "debug")
    args = consumer_table.build_parser().parse_args(["stream"])
    assert (args.target, args.log_level) == ("127.0.0.1:50051", "info")


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--max-streams", "0"], "argument --max-streams: must be at least 1: 0"),
        (["--reply-log-max-bytes", "1.5"], "not a whole number of bytes: '1.5'"),
        (["--max-connection-age-s", "inf"], "must be a finite number > 0: inf"),
        (["--reply-log-lease-s", "0"], "argument --reply-log-lease-s: must be a finite number > 0"),
        (["--shutdown-grace-s", "-1"], "must be a finite number >= 0: -1"),
        (["--metrics-port", "65536"], "argument --metrics-port: a port is 0..65535"),
        (["--budget-usd", "0"], "argument --budget-usd: must be a finite number > 0: 0"),
    ],
)
def test_a_producer_value_past_its_edge_is_one_usage_line(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        producer_cli.main(["--port", "0", *argv])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("python -m producer: error: ") and error in last


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["stream", "--deadline-s", "inf"], "argument --deadline-s: must be a finite number > 0"),
        (["stream", "--queue-size", "0"], "argument --queue-size: must be at least 1: 0"),
        (["stream", "--process-delay-ms", "-1"], "must be at least 0: -1"),
        (["replay", "--case", "utf8-write", "--max-frames", "x"], "whole number of frames"),
    ],
)
def test_a_consumer_value_past_its_edge_is_one_usage_line(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        consumer_table.build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"python -m consumer {argv[0]}: error: ") and error in last


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["trace", "t.jsonl", "--max-marks", "0"], "argument --max-marks: must be at least 1"),
        (["demo", "--log-level", "loud"], "argument --log-level: invalid choice: 'loud'"),
    ],
)
def test_a_replywire_value_past_its_edge_is_one_usage_line(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        replywire_table.build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"python -m replywire {argv[0]}: error: ") and error in last
