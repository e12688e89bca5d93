"""The trace context's way in (bounded, never an error), the switch, and the ids a record
carries: no process, no socket (a tracing without a collector exports nothing)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.trace import SpanKind

from replywire.runtime.otel import (
    MAX_TRACEPARENT_CHARS,
    MAX_TRACESTATE_CHARS,
    MAX_TRACESTATE_MEMBERS,
    Tracing,
    joined_tracestate,
)
from replywire.runtime.tracing import active, endpoint_from

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{PARENT}-01"
WHY = {
    None,
    "traceparent_malformed",
    "traceparent_oversized",
    "tracestate_oversized",
    "tracestate_malformed",
    "traceparent_repeated",
    "tracestate_truncated",
}


@pytest.fixture(scope="module")
def tracing() -> Tracing:
    return Tracing("replywire-test", None, environ={})


def test_off_by_default_and_no_thread_without_a_collector() -> None:
    assert active() is None
    before = threading.active_count()
    Tracing("replywire-test", None, environ={})
    assert threading.active_count() == before


def test_a_valid_context_is_continued(tracing: Tracing) -> None:
    parent, why = tracing.context_from(VALID, "vendor=value")
    assert why is None and parent is not None
    span = tracing.start("s", kind=SpanKind.CLIENT, parent=parent)
    ids = tracing.ids(span)
    assert ids["trace_id"] == TRACE_ID and len(ids["span_id"]) == 16
    assert dict(tracing.metadata(span))["traceparent"].startswith(f"00-{TRACE_ID}-")
    assert dict(tracing.metadata(span))["tracestate"] == "vendor=value"


@pytest.mark.parametrize(
    ("traceparent", "tracestate", "why"),
    [
        ("garbage", None, "traceparent_malformed"),
        (f"00-{'0' * 32}-{PARENT}-01", None, "traceparent_malformed"),  # the invalid trace id
        (f"00-{TRACE_ID}-{'0' * 16}-01", None, "traceparent_malformed"),
        (f"ff-{TRACE_ID}-{PARENT}-01", None, "traceparent_malformed"),  # a forbidden version
        (VALID + "-" + "x" * (MAX_TRACEPARENT_CHARS - len(VALID)), None, "traceparent_oversized"),
        (VALID, "k=" + "v" * (MAX_TRACESTATE_CHARS - 1), "tracestate_oversized"),
        (VALID, "0", "tracestate_malformed"),
    ],
)
def test_what_is_ignored_and_why(
    tracing: Tracing, traceparent: str, tracestate: str | None, why: str
) -> None:
    parent, said = tracing.context_from(traceparent, tracestate)
    assert said == why
    assert (parent is not None) == why.startswith("tracestate")  # the traceparent kept


def test_the_bound_is_exact(tracing: Tracing) -> None:
    """A later version may add fields (a version-00 reader keeps the first four)."""
    at_bound = f"01-{TRACE_ID}-{PARENT}-01-" + "a" * (MAX_TRACEPARENT_CHARS - len(VALID) - 1)
    assert len(at_bound) == MAX_TRACEPARENT_CHARS
    assert tracing.context_from(at_bound, None)[1] is None
    assert tracing.context_from(at_bound + "a", None)[1] == "traceparent_oversized"


@given(traceparent=st.text(max_size=400), tracestate=st.none() | st.text(max_size=700))
def test_any_value_is_continued_or_ignored_never_an_error(
    tracing: Tracing, traceparent: str, tracestate: str | None
) -> None:
    parent, why = tracing.context_from(traceparent, tracestate)
    assert why in WHY
    if not traceparent:
        assert (parent, why) == (None, None)
    elif len(traceparent) > MAX_TRACEPARENT_CHARS:
        assert (parent, why) == (None, "traceparent_oversized")
    if parent is None:
        assert why is None or why.startswith("traceparent") or not traceparent


@given(
    pairs=st.lists(
        st.tuples(st.sampled_from(["traceparent", "tracestate", "other"]), st.text(max_size=80)),
        max_size=6,
    )
)
def test_any_metadata_is_continued_or_ignored(
    tracing: Tracing, pairs: list[tuple[str, str]]
) -> None:
    _, why = tracing.context_from_metadata(pairs)
    assert why in WHY


def test_two_traceparents_make_the_context_invalid_even_when_equal(tracing: Tracing) -> None:
    for second in (VALID, f"00-{TRACE_ID}-{'1' * 16}-01", "garbage"):
        pairs = [("traceparent", VALID), ("tracestate", "a=1"), ("traceparent", second)]
        assert tracing.context_from_metadata(pairs) == (None, "traceparent_repeated")


def test_several_tracestates_are_one_list_in_order(tracing: Tracing) -> None:
    assert joined_tracestate([]) == (None, False)
    assert joined_tracestate(["a=1, b=2", "", " c=3 ,,d=4"]) == ("a=1,b=2,c=3,d=4", False)
    pairs = [("tracestate", "a=1"), ("traceparent", VALID), ("tracestate", "b=2,c=3")]
    parent, why = tracing.context_from_metadata(pairs)
    assert why is None and parent is not None
    span = tracing.start("s", kind=SpanKind.SERVER, parent=parent)
    assert dict(tracing.metadata(span))["tracestate"] == "a=1,b=2,c=3"


def test_a_list_of_more_than_32_members_keeps_its_first_32(tracing: Tracing) -> None:
    members = [f"k{i}=v" for i in range(MAX_TRACESTATE_MEMBERS + 1)]
    at_bound = [("traceparent", VALID), ("tracestate", ",".join(members[:16]))]
    at_bound.append(("tracestate", ",".join(members[16:MAX_TRACESTATE_MEMBERS])))
    parent, why = tracing.context_from_metadata(at_bound)
    assert why is None and parent is not None
    parent, why = tracing.context_from_metadata([*at_bound, ("tracestate", members[-1])])
    assert why == "tracestate_truncated" and parent is not None
    span = tracing.start("s", kind=SpanKind.SERVER, parent=parent)
    kept = dict(tracing.metadata(span))["tracestate"]
    assert kept == ",".join(members[:MAX_TRACESTATE_MEMBERS])


def test_the_switch() -> None:
    assert endpoint_from(None, {}) is None
    assert endpoint_from("http://a:4317", {}) == "http://a:4317"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4317"}
    assert endpoint_from(None, env) == "http://b:4317"
    assert endpoint_from("http://a:4317", env) == "http://a:4317"
    assert endpoint_from(None, {**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}) == (
        "http://c:4317"
    )
    assert endpoint_from("http://a:4317", {**env, "OTEL_SDK_DISABLED": "TRUE"}) is None
