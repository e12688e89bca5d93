"""Only the producer's gRPC edge sees the request as protobuf.

The edge (``producer/edge/``) turns an ``OpenRequest`` into one ``CheckedRequest``
(``shared/requests.py``); past it, no function takes the protobuf message, and no
module outside the edge reads one of its fields. (The gRPC context, typed with the
request's message as grpc.aio's generic parameter, is the transport: the delivery
writes to it.)
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
EDGE: Final = ROOT / "producer" / "edge"


def takes_the_request(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
                text = "" if argument.annotation is None else ast.unparse(argument.annotation)
                if "OpenRequest" in text and "ServicerContext" not in text:
                    found.append(f"{node.name}({argument.arg}: {text})")
    return found


def test_past_the_edge_no_function_takes_the_protobuf_request() -> None:
    found = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / "producer").rglob("*.py"))
        if EDGE not in path.parents and (names := takes_the_request(path))
    }
    assert found == {}


def test_the_edge_does_take_it() -> None:
    """The check can fail: the edge's own ``Open`` is found."""
    assert any("Open(request" in name for name in takes_the_request(EDGE / "servicer.py"))
