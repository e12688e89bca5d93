"""The consumer's timeline and live view read back: the table into rows, the SVG, the tour's
samples with what varies masked."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET


def parse_table(text: str) -> list[dict[str, str]]:
    """The rows of the table printed after the summary line, cut at the header's rule."""
    lines = text.splitlines()
    rule_at = next(i for i, line in enumerate(lines) if line.startswith("---"))
    header, rule = lines[rule_at - 1], lines[rule_at]
    bounds = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
    names = [header[start:end].strip() or header[start:].split()[0] for start, end in bounds]
    rows = []
    for line in lines[rule_at + 1 :]:
        if not line.strip():
            break
        cells = [line[start:end].strip() for start, end in bounds[:-1]]
        cells.append(line[bounds[-1][0] :].strip())
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


SVG = "{http://www.w3.org/2000/svg}"


def counted(event_cell: str) -> tuple[str, int]:
    match = re.fullmatch(r"(\w+) ×(\d+)", event_cell)
    return (match.group(1), int(match.group(2))) if match else (event_cell, 1)


def svg_of(html: str) -> ET.Element:
    start, end = html.index("<svg"), html.index("</svg>") + len("</svg>")
    return ET.fromstring(html[start:end])


def rejected_rows(drawn: str, headline: str) -> list[str]:
    """The rows of the not-accepted block, borders and padding off."""
    lines = drawn.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"╭─ {headline} "))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    return [ln[2:-1].rstrip() for ln in lines[start + 1 : end]]


MASKS = (
    (re.compile(r"\b\d\d:\d\d:\d\d\.\d{3}\b"), "HH:MM:SS.mmm"),
    (re.compile(r"\b\d+\.\d s\b"), "N.N s"),
    # A short id (8 digits, as the timeline and the tour's commands write it), or the
    # final line's cut one (23 digits and an ellipsis: consumer/view.py).
    (re.compile(r"(· |stream |STREAM=)[0-9a-f]{8}(?:[0-9a-f]{15}…|\b)"), r"\1STREAMID"),
    (re.compile(r"(peer=ipv4:127\.0\.0\.1:)\d+"), r"\1PORT"),
    (re.compile(r"backoff_ms=[\d.]+"), "backoff_ms=N"),
    (re.compile(r"paused \d+×"), "paused N×"),
    (re.compile(r"queue \d+/"), "queue N/"),
    # The build of the hot modules (native/): compiled where a C compiler is, else pure.
    (re.compile(r"\bbuild=(compiled|pure|mixed)\b"), "build=BUILD"),
    # How many tries failed while a producer was down: timing (0 stays 0).
    (re.compile(r"\b(reconnects[ =])[1-9]\d*"), r"\1N"),
)


#: Samples whose frames, bytes and partial text depend on when the producer was stopped.
STOPPED_MID_STREAM = {"view-killed"}


#: The timeline rows (side, event, from -> to) that are there or not by timing: a failed
#: resume attempt (the restarted producer may answer the first one).
TIMING_ROWS = {("consumer/reader", "state_changed", "connecting -> ended")}


def masked(block: str, name: str = "") -> tuple[list[str], list[str]]:
    """A sample with what varies run to run masked: its trace lines (in any order: the
    reader's and the core's records of one moment may come either way) and the rest."""
    for pattern, replacement in MASKS:
        block = pattern.sub(replacement, block)
    lines = [line for line in block.splitlines() if "reads_paused_episode" not in line]
    if name in STOPPED_MID_STREAM:
        lines = without_partial_text(lines)
    trace = sorted(line for line in lines if line.startswith("HH:MM:SS.mmm"))
    return trace, [line for line in lines if not line.startswith("HH:MM:SS.mmm")]


def without_partial_text(lines: list[str]) -> list[str]:
    """The verdict without the counts and the text that depend on how far the stream got:
    the box's ``text`` row says only that a partial text was kept."""
    kept, in_text = [], False
    for line in (re.sub(r"frames \d+  \d+ B", "frames N  N B", line) for line in lines):
        if line.startswith("│ text    partial ("):
            kept.append("│ text    partial")
            in_text = True
        elif not (in_text and line.startswith("│         ")):
            kept.append(line)
            in_text = False
    return kept


def timeline_shape(block: str) -> tuple[str, str, set[tuple[str, str, str]]]:
    """A ``make trace`` sample: its command (stream id masked), the verdict on its summary
    line, and which (side, event, from -> to) rows it has; how many chunks each run has,
    the times and the order of the two sides are timing."""
    unfenced = "\n".join(line for line in block.splitlines() if not line.startswith("```"))
    command, summary, table = unfenced.split("\n", 2)
    verdict = re.fullmatch(r"stream [0-9a-f]{32} \(replace-file\): ([^;]+); .*", summary)
    assert verdict, summary
    rows = {
        (row["side"], row["event"].split(" ×")[0], row["from -> to"]) for row in parse_table(table)
    }
    return masked(command)[1][0], verdict.group(1), rows - TIMING_ROWS
