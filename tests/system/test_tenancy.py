"""A reply belongs to its caller: two token identities, ``alice`` and ``bob``, across real
producer processes (one, or two replicas sharing a private valkey/redis reply log), with
the recording and with live Gemini (the fake server).

* The same stream id under two identities names two unrelated replies: each reads only
  its own, both complete, the provider is called once per identity, and what ``bob`` is
  answered is byte for byte what he is answered for a stream id nobody used, with the
  same binding as ``alice``'s or another one, whoever opened first.
* ``Cancel`` of the same stream id by another identity stops nothing and says so as it
  would for an unused id; the owner's own ``Cancel`` stops the generation (also relayed
  by the other replica).
* Fair share: one identity at ``--max-streams-per-identity`` is refused
  ``identity_stream_limit`` while another is still served; without tokens only
  ``--max-streams`` applies.

The consumers run in this process (the consumer's own client, real gRPC): a matrix of
processes would take minutes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog

from replywire.consumer.client import stream_reply
from replywire.consumer.options import StreamOptions
from replywire.consumer.security import Security
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan
from tests.gemini_runs import API_KEY
from tests.processes import FakeGeminiProcess, Producer, fake_gemini, producer, wait_for
from tests.redis_server import RedisServer, redis_server

pytestmark = pytest.mark.timeout(240)

#: Two development cases: two different bindings.
CASE_A, CASE_B = "backup-schedule", "replace-file"
IDENTITIES = ("alice", "bob")
#: The result fields that name the stream rather than the reply.
NAMING_FIELDS = ("stream_id", "flow")


@pytest.fixture(scope="module")
def tokens() -> dict[str, str]:
    return {name: secrets.token_urlsafe(24) for name in IDENTITIES}


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory, tokens: dict[str, str]) -> Path:
    path = tmp_path_factory.mktemp("tokens") / "tokens"
    path.write_text("".join(f"{name} {token}\n" for name, token in tokens.items()))
    return path


@dataclass(frozen=True)
class Setup:
    """What serves the callers: the source, one producer or two replicas, more flags."""

    source: str
    replicas: int
    extra: tuple[str, ...] = ()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGeminiProcess]:
    with fake_gemini(API_KEY) as server:
        yield server


@contextmanager
def deployment(
    tmp_path: Path,
    token_file: Path,
    fake: FakeGeminiProcess,
    server: RedisServer | None,
    setup: Setup,
) -> Iterator[list[Producer]]:
    """One producer (the memory log) or two replicas (the Redis log), with tokens; the
    Gemini source's calls go to the fake server and one file ledger."""
    args = ["--auth-tokens", str(token_file), *setup.extra]
    if setup.source == "gemini":
        args += ["--source", "gemini", "--gemini-base-url", fake.base_url,
                 "--ledger", str(tmp_path / "ledger.json"), "--budget-usd", "1.0"]  # fmt: skip
    if server is not None:
        args += ["--reply-log", server.url]
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                producer(tmp_path, *args, name=f"p{index}", env={"GEMINI_API_KEY": API_KEY})
            )
            for index in range(setup.replicas)
        ]


def request(recording: Recording, case_id: str, stream_id: str) -> ReplyRequest:
    return ReplyRequest(
        case_id=case_id,
        binding=recording.case(case_id).binding,
        wire=WireFormat.LENGTH_PREFIXED,
        plan=ChunkPlan.parse("frame"),
        stream_id=stream_id,
    )


_QUIET = structlog.wrap_logger(
    None, wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL)
)


def stream(target: str, token: str, reply_request: ReplyRequest) -> dict[str, Any]:
    """One stream by the consumer's own client, as the token's holder; its result."""
    options = StreamOptions(target=target, deadline_s=60, security=Security(token=token))
    result = asyncio.run(stream_reply(reply_request, options, logger=_QUIET))
    return result.to_dict()


def answered(result: dict[str, Any]) -> str:
    """The result without the fields that name the stream: what the reply was."""
    return json.dumps({k: v for k, v in result.items() if k not in NAMING_FIELDS}, indent=1)


def first_inputs(p: Producer, stream_id: str, caller: str) -> list[str]:
    """The inputs of the caller's deliveries of the stream id after ``received``."""
    return [
        r["input"]
        for r in p.stream_trace(stream_id)
        if r["event"] == "state_changed" and r.get("caller") == caller
        and r["from_state"] == "received"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "setup",
    [Setup(source, replicas) for source in ("recording", "gemini") for replicas in (1, 2)],
    ids=lambda setup: f"{setup.source}-{'one-producer' if setup.replicas == 1 else 'replicas'}",
)
def test_the_same_stream_id_under_two_identities_is_two_replies(
    tmp_path: Path,
    token_file: Path,
    tokens: dict[str, str],
    fake: FakeGeminiProcess,
    recording: Recording,
    setup: Setup,
) -> None:
    before = len(fake.log())
    with ExitStack() as stack:
        server = stack.enter_context(redis_server()) if setup.replicas == 2 else None
        producers = stack.enter_context(deployment(tmp_path, token_file, fake, server, setup))
        alice_at, bob_at = producers[0].target, producers[-1].target
        alice, bob = tokens["alice"], tokens["bob"]
        # The same binding: alice first, then bob under her stream id.
        alice_same = stream(alice_at, alice, request(recording, CASE_A, "shared-id"))
        bob_same = stream(bob_at, bob, request(recording, CASE_A, "shared-id"))
        # Another binding, bob first: he cannot claim the id from alice.
        bob_other = stream(bob_at, bob, request(recording, CASE_B, "claimed-first"))
        alice_other = stream(alice_at, alice, request(recording, CASE_A, "claimed-first"))
        # What bob is answered for stream ids nobody used.
        bob_unused_same = stream(bob_at, bob, request(recording, CASE_A, "unused-1"))
        bob_unused_other = stream(bob_at, bob, request(recording, CASE_B, "unused-2"))
        inputs = {
            (caller, stream_id): [i for p in producers for i in first_inputs(p, stream_id, caller)]
            for caller in IDENTITIES
            for stream_id in ("shared-id", "claimed-first")
        }
    for result in (alice_same, bob_same, bob_other, alice_other):
        assert (result["status"], result["reason"]) == ("complete", None), result
    assert answered(bob_same) == answered(bob_unused_same)
    assert answered(bob_other) == answered(bob_unused_other)
    assert answered(alice_same) == answered(bob_same)  # the same binding: the same reply
    assert alice_other["case_id"] == CASE_A and bob_other["case_id"] == CASE_B
    # Each caller's Open made its own reply (verify), never attached to the other's.
    assert all(found == ["verify"] for found in inputs.values()), inputs
    if setup.source == "gemini":
        # One provider call per identity and stream id: six replies, six calls.
        calls = fake.log()[before:]
        assert len(calls) == 6
        ledger = json.loads((tmp_path / "ledger.json").read_text())["entries"]
        charged = sorted(entry["identity"] for entry in ledger)
        assert charged == ["alice", "alice", "bob", "bob", "bob", "bob"]
        assert all(entry["state"] == "settled" for entry in ledger)


def cancel(target: str, token: str, stream_id: str) -> bool:
    with grpc.insecure_channel(target) as channel:
        reply: pb.CancelReply = pb_grpc.ReplyStreamStub(channel).Cancel(
            pb.CancelRequest(stream_id=stream_id),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=10,
        )
    return reply.cancelled


def test_another_identity_cannot_cancel_a_reply_and_learns_nothing_of_it(
    tmp_path: Path,
    token_file: Path,
    tokens: dict[str, str],
    fake: FakeGeminiProcess,
    recording: Recording,
) -> None:
    """alice's live reply is generating with nobody reading (a long detach grace): bob's
    Cancel of her stream id, on either replica, is answered as for an unused id and
    stops nothing; hers, relayed by the other replica, stops it at once."""
    with (
        redis_server() as server,
        deployment(tmp_path, token_file, fake, server, Setup("gemini", 2, (
            "--model", "fake-slow-drip", "--detach-grace-s", "120"))) as (a, b),
    ):  # fmt: skip
        before = len(fake.log())
        options = StreamOptions(target=a.target, deadline_s=1.0,
                                security=Security(token=tokens["alice"]))  # fmt: skip
        left = asyncio.run(stream_reply(request(recording, CASE_A, "alices"), options,
                                        logger=_QUIET))  # fmt: skip
        assert left.reason == "deadline_exceeded"  # she left; her reply goes on generating
        unused = [cancel(p.target, tokens["bob"], "never-used") for p in (a, b)]
        bobs = [cancel(p.target, tokens["bob"], "alices") for p in (a, b)]
        assert bobs == unused == [False, False]
        assert fake.log()[before]["client_disconnected"] is False  # still generating
        assert cancel(b.target, tokens["alice"], "alices") is True  # relayed to a
        wait_for(lambda: bool(fake.log()[before]["client_disconnected"]), timeout=15)
        wait_for(lambda: a.logged("generation_ended"))
        stopped = [(r["identity"], r["reason"]) for r in a.trace()
                   if r["event"] == "generation_stopped"]  # fmt: skip
    assert stopped == [("alice", "consumer_cancelled")]


def slow(recording: Recording, stream_id: str) -> ReplyRequest:
    """A stream that holds its slot for seconds (a chunk every 400 ms)."""
    return replace(request(recording, CASE_A, stream_id), chunk_interval_ms=400)


def test_one_identity_at_its_limit_is_refused_while_another_is_served(
    tmp_path: Path, token_file: Path, tokens: dict[str, str], recording: Recording
) -> None:
    """--max-streams 8, --max-streams-per-identity 2: alice holds two slow streams; her
    third is refused identity_stream_limit (RESOURCE_EXHAUSTED) at once; bob, meanwhile,
    completes."""

    async def scenario(target: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        def options(name: str, deadline_s: float) -> StreamOptions:
            return StreamOptions(target=target, deadline_s=deadline_s,
                                 security=Security(token=tokens[name]))  # fmt: skip

        holding = [
            asyncio.create_task(stream_reply(slow(recording, f"slow-{i}"),
                                             options("alice", 1.5), logger=_QUIET))
            for i in range(2)
        ]  # fmt: skip
        await asyncio.sleep(0.5)  # both admitted and streaming
        third = await stream_reply(request(recording, CASE_A, "third"), options("alice", 30),
                                   logger=_QUIET)  # fmt: skip
        served = await stream_reply(request(recording, CASE_A, "bobs"), options("bob", 30),
                                    logger=_QUIET)  # fmt: skip
        held = [(await task).to_dict() for task in holding]
        return [third.to_dict(), served.to_dict()], held[0]

    with producer(
        tmp_path, "--auth-tokens", str(token_file), "--max-streams", "8",
        "--max-streams-per-identity", "2",
    ) as running:  # fmt: skip
        (third, served), held = asyncio.run(scenario(running.target))
        refused = [r for r in running.trace() if r.get("to_state") == "refused"]
        listening = next(r for r in running.trace() if r["event"] == "producer_listening")
    assert (third["status"], third["reason"]) == ("refused", "identity_stream_limit")
    assert third["transport"]["grpc_code"] == "RESOURCE_EXHAUSTED"
    assert (served["status"], served["reason"]) == ("complete", None)
    assert held["reason"] == "deadline_exceeded"  # it held its slot to the end
    assert [(r["caller"], r["reason"]) for r in refused] == [("alice", "identity_stream_limit")]
    assert listening["max_streams_per_identity"] == 2


def test_the_per_identity_limit_defaults_to_a_quarter_and_needs_tokens(
    tmp_path: Path, token_file: Path, recording: Recording
) -> None:
    """With tokens and no --max-streams-per-identity: a quarter of --max-streams. Without
    tokens every caller is one identity: the flag does not apply, three slow streams of
    ``anonymous`` are all served under --max-streams 4."""
    with producer(tmp_path, "--auth-tokens", str(token_file), "--max-streams", "10",
                  name="tokens") as with_tokens:  # fmt: skip
        listening = next(r for r in with_tokens.trace() if r["event"] == "producer_listening")
        assert listening["max_streams_per_identity"] == 2

    async def three(target: str) -> list[str | None]:
        options = StreamOptions(target=target, deadline_s=1.5)
        tasks = [stream_reply(slow(recording, f"anon-{i}"), options, logger=_QUIET)
                 for i in range(3)]  # fmt: skip
        return [result.reason for result in await asyncio.gather(*tasks)]

    with producer(tmp_path, "--max-streams", "4", "--max-streams-per-identity", "1",
                  name="anonymous") as open_producer:  # fmt: skip
        listening = next(r for r in open_producer.trace() if r["event"] == "producer_listening")
        assert listening["max_streams_per_identity"] is None
        assert asyncio.run(three(open_producer.target)) == ["deadline_exceeded"] * 3
