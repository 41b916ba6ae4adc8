"""The native engine relay (``EngineLink``) without sockets: recorded llama-server streams wrapped in the HTTP/1.1
chunked framing llama-server sends, cut at random points, must reach the client exactly as the translator alone
makes them; whole bodies, error heads, a client that leaves, malformed framing and an engine that closes early
all end the exchange through its future, never as an exception out of ``feed``."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blazar import _native
from tests.native.standins import Client, Future, Gone
from tests.native.streams import CASE_NAMES, CASES, DIALECTS, MODEL, Case

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nKeep-Alive: timeout=5\r\n\r\n"


def chunked(body: bytes, sizes: Sequence[int]) -> bytes:
    """``body`` in HTTP chunks of the given sizes (cycled), then the last chunk."""
    out = [HEAD]
    pos, i = 0, 0
    while pos < len(body):
        n = max(1, sizes[i % len(sizes)])
        piece = body[pos : pos + n]
        out.append(b"%x\r\n%s\r\n" % (len(piece), piece))
        pos += n
        i += 1
    out.append(b"0\r\n\r\n")
    return b"".join(out)


def cut(data: bytes, points: Sequence[int]) -> list[bytes]:
    edges = [0, *sorted(p % (len(data) + 1) for p in points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def relay(
    wire: Sequence[bytes], dialect: str, client: Client | None = None, relay_after: int = 1
) -> tuple[Future, Future, Any, Client, Any]:
    """Feeds ``wire`` to a link; the relay starts once ``relay_after`` pieces went in (the task wakes late)."""
    link = _native.EngineLink()
    head, done = Future(), Future()
    client = client or Client()
    tr = _native.StreamTranslator(dialect, MODEL, include_usage=True)
    link.begin(head)
    started = False
    for i, piece in enumerate(wire):
        link.feed(piece)
        if not started and head.done() and head.error is None and i + 1 >= relay_after:
            link.relay(tr, client.send_bytes, done)
            started = True
    if not started and head.done() and head.error is None:
        link.relay(tr, client.send_bytes, done)
    return head, done, tr, client, link


def direct(case: Case, dialect: str) -> tuple[bytes, Any]:
    tr = _native.StreamTranslator(dialect, MODEL, include_usage=True)
    return tr.feed(case.stream) + tr.finish(), tr


def comparable(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in ("ttft_ms", "tpot_ms")}


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_every_recorded_stream_relays_as_the_translator_alone_makes_it(case: Case) -> None:
    wire = chunked(case.stream, [len(case.stream)])
    for dialect in DIALECTS:
        head, done, tr, client, link = relay([wire], dialect)
        assert head.result == 200 and head.error is None
        assert done.settled == 1 and done.result is None and done.error is None
        out = b"".join(client.sent) + tr.finish()
        want, want_tr = direct(case, dialect)
        if dialect == "openai":
            assert out == want
        assert comparable(tr.summary()) == comparable(want_tr.summary())
        assert link.reusable


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(CASES),
    sizes=st.lists(st.integers(1, 400), min_size=1, max_size=8),
    points=st.lists(st.integers(0, 1 << 20), max_size=12),
    relay_after=st.integers(1, 6),
)
def test_any_framing_and_any_cut_give_the_same_bytes(
    case: Case, sizes: list[int], points: list[int], relay_after: int
) -> None:
    wire = chunked(case.stream, sizes)
    head, done, tr, client, link = relay(cut(wire, points), "openai", relay_after=relay_after)
    assert (head.result, done.settled, done.result, done.error) == (200, 1, None, None)
    assert b"".join(client.sent) + tr.finish() == direct(case, "openai")[0]
    assert link.reusable


def test_whole_bodies_content_length_and_chunked() -> None:
    body = CASES[0].whole
    for wire in (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body),
        chunked(body, [7, 100]),
    ):
        for points in ([], [5], [len(wire) - 1], list(range(0, len(wire), 13))):
            link = _native.EngineLink()
            head, done = Future(), Future()
            link.begin(head)
            reading = False
            for piece in cut(wire, points):
                link.feed(piece)
                if head.done() and not reading:  # the body is read once the head is in, as the pool does
                    reading = True
                    link.read_body(done)
                    with pytest.raises(ValueError):
                        link.read_body(Future())  # one reader per response
            assert head.result == 200
            assert (done.result, done.settled) == (body, 1)
            assert link.reusable


def test_a_connection_carries_exchanges_back_to_back_and_refuses_overlap() -> None:
    link = _native.EngineLink()
    for _ in range(3):
        head, done = Future(), Future()
        link.begin(head)
        with pytest.raises(ValueError, match="busy"):
            link.begin(Future())  # one exchange at a time
        link.feed(b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\n")
        assert head.result == 404
        link.read_body(done)
        link.feed(b"nope")
        assert done.result == b"nope" and link.reusable


def test_a_client_that_leaves_ends_the_relay_with_its_error_awaitable() -> None:
    case = CASES[0]
    wire = chunked(case.stream, [50])
    _head, done, _tr, client, link = relay(
        cut(wire, range(0, len(wire), 40)), "openai", Client(leave_after=2)
    )
    assert done.settled == 1 and isinstance(done.result, Gone)
    assert len(client.sent) == 2
    assert not link.reusable  # the engine is still sending: the caller closes the connection


def test_tick_measures_the_engines_quiet_only_while_relaying() -> None:
    case = CASES[0]
    wire = chunked(case.stream, [50])
    link = _native.EngineLink()
    assert link.tick() is None  # no exchange
    head, done, client = Future(), Future(), Client()
    link.begin(head)
    link.feed(wire[:200])
    assert link.tick() is None  # the head is in, but nothing is relayed yet
    link.relay(_native.StreamTranslator("anthropic", MODEL), client.send_bytes, done)
    sent = len(client.sent)
    quiet = link.tick()
    assert quiet is not None and 0 <= quiet < 5
    assert len(client.sent) == sent  # no ping is owed after a moment's quiet
    link.feed(wire[200:])
    assert done.settled == 1 and done.result is None
    assert link.tick() is None  # the stream ended


def test_malformed_engine_output_fails_the_future_not_feed() -> None:
    # SSE over a size bound inside good HTTP: StreamError
    big = b"data: " + b"x" * (5 << 20) + b"\n\n"
    _head, done, *_ = relay([chunked(big, [1 << 20])], "openai")
    assert isinstance(done.error, _native.StreamError)
    # bad chunk framing, before and after the relay started: LinkError
    for wire in ([HEAD + b"zz\r\n"], [HEAD, b"zz\r\n"]):
        head, done, *_ = relay(wire, "openai")
        failed = head if len(wire) == 1 else done  # one read holding both: the head's future fails
        assert isinstance(failed.error, _native.LinkError) and "chunk size" in str(failed.error)
    # the engine closed between the head and the body's reader: the reader gets the failure
    link = _native.EngineLink()
    head, done = Future(), Future()
    link.begin(head)
    link.feed(HEAD)
    link.lost()
    link.read_body(done)
    assert isinstance(done.error, _native.LinkError) and head.result == 200
    # not HTTP at all: the head fails
    link = _native.EngineLink()
    head = Future()
    link.begin(head)
    link.feed(b"SSH-2.0-OpenSSH\r\n\r\n")
    assert isinstance(head.error, _native.LinkError) and not link.reusable
    link.feed(b"more")  # ignored once broken
    # bytes while no request waits break the connection quietly
    idle = _native.EngineLink()
    idle.feed(b"HTTP/1.1 200 OK\r\n\r\n")
    with pytest.raises(_native.LinkError, match="closed"):
        idle.begin(Future())  # a broken connection refuses new exchanges (the pool then opens another)


def test_an_engine_that_closes_early_fails_the_waiting_future() -> None:
    for wire, waiting, message in [
        (b"", "head", "before answering"),
        (b"HTTP/1.1 200 OK\r\nContent-", "head", "inside its response head"),
        (HEAD + b"5\r\nda", "relay", "before its response ended"),
    ]:
        head, done, *_rest, link = relay([wire] if wire else [], "openai")
        link.lost()
        fut = head if waiting == "head" else done
        assert isinstance(fut.error, _native.LinkError) and message in str(fut.error), wire
        assert fut.settled == 1 and link.closed and not link.reusable
    # a body delimited by the close ends cleanly at the close
    link = _native.EngineLink()
    head, done = Future(), Future()
    link.begin(head)
    link.feed(b"HTTP/1.1 200 OK\r\n\r\n{}")
    link.read_body(done)
    link.eof()
    assert done.result == b"{}" and not link.reusable


def test_a_cancelled_waiter_takes_nothing_and_abandon_drops_the_client() -> None:
    link = _native.EngineLink()
    head = Future()
    head.settled = 1  # cancelled
    link.begin(head)
    link.feed(HEAD)
    assert head.result is None
    client = Client()
    done = Future()
    link.relay(_native.StreamTranslator("openai", MODEL), client.send_bytes, done)
    link.abandon()
    link.feed(b"5\r\ndata:\r\n")
    assert client.sent == [] and done.settled == 0 and not link.reusable


def test_a_stray_crlf_after_the_last_chunk_keeps_the_stream_but_not_the_connection() -> None:
    case = CASES[0]
    head, done, tr, client, link = relay([chunked(case.stream, [90]) + b"\r\n"], "openai")
    assert (head.result, done.result, done.error) == (200, None, None)
    assert b"".join(client.sent) + tr.finish() == direct(case, "openai")[0]
    assert not link.reusable
