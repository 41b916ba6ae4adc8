"""Native SSE and NDJSON parsers against the Python oracle (tests/oracle/frames.py): the same
events and the same errors for any input cut anywhere, plus the documented edge cases."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blazar import _native
from tests.native.streams import CASES
from tests.oracle import frames as oracle

Parser = _native.SseParser | oracle.SseParser


def run_sse(parser: Parser, pieces: Sequence[bytes]) -> tuple[list[tuple[str, str]], str | None, bool | None]:
    events: list[tuple[str, str]] = []
    for piece in pieces:
        try:
            events += parser.feed(piece)
        except ValueError as err:
            return events, str(err), None
    return events, None, parser.finish()


def cut(data: bytes, points: Sequence[int]) -> list[bytes]:
    edges = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


# Bytes that exercise every branch: fields, separators, line ends, BOM, multibyte UTF-8,
# invalid UTF-8.
SSE_ALPHABET = [
    b"data",
    b"event",
    b"error",
    b"id",
    b"retry",
    b":",
    b": ",
    b" ",
    b"\n",
    b"\r",
    b"\r\n",
    b"x",
    b"[DONE]",
    b'{"a":1}',
    b"\xef\xbb\xbf",
    "é".encode(),
    "😀".encode(),
    "中".encode(),
    b"\xf0\x9f",
    b"\xff",
]
sse_bytes = st.lists(st.sampled_from(SSE_ALPHABET), max_size=60).map(b"".join) | st.binary(max_size=200)


@settings(max_examples=400, deadline=None)
@given(
    data=sse_bytes, points=st.lists(st.integers(0, 400), max_size=8), bound=st.sampled_from([8, 32, 4 << 20])
)
def test_sse_matches_oracle_for_any_input_and_cuts(data: bytes, points: list[int], bound: int) -> None:
    pieces = cut(data, [p for p in points if p <= len(data)])
    native = run_sse(_native.SseParser(bound), pieces)
    assert native == run_sse(oracle.SseParser(bound), pieces)
    if native[1] is None:
        assert native == run_sse(_native.SseParser(bound), [data]), "cuts must not change the events"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_recorded_streams_byte_by_byte(case: object) -> None:
    stream = case.stream  # type: ignore[attr-defined]
    whole = run_sse(_native.SseParser(), [stream])
    assert whole[1] is None and whole[2] is True
    assert run_sse(_native.SseParser(), [stream[i : i + 1] for i in range(len(stream))]) == whole
    assert whole == run_sse(oracle.SseParser(), [stream])
    assert whole[0][-1] == ("message", "[DONE]") or whole[0][-1][1].startswith('{"error"')


def test_sse_edge_cases() -> None:
    p = _native.SseParser()
    assert p.feed(b"\xef\xbb\xbfdata: a\r") == []
    assert p.feed(b"\ndata:b\n: note\nevent: x\n\n") == [("x", "a\nb")]
    assert p.feed(b"error: {}\n") == [("error", "{}")]
    assert p.feed(b"data: tail\n") == []
    assert p.finish() is False
    with pytest.raises(_native.StreamError, match=r"longer than 4 bytes \(line starts at byte 0\)"):
        _native.SseParser(4).feed(b"data: x")
    with pytest.raises(_native.StreamError, match="larger than 12 bytes"):
        _native.SseParser(12).feed(b"data:123456\ndata:123456\n")
    with pytest.raises(ValueError, match="max_frame must be > 0"):
        _native.SseParser(0)


def run_ndjson(
    parser: _native.NdjsonParser | oracle.NdjsonParser, pieces: Sequence[bytes]
) -> tuple[list[str], str | None]:
    lines: list[str] = []
    try:
        for piece in pieces:
            lines += parser.feed(piece)
        lines += parser.finish()
    except ValueError as err:
        return lines, str(err)
    return lines, None


ndjson_bytes = st.lists(
    st.sampled_from([b'{"a":1}', b"\n", b"\r", b" ", b"\x0b", b"\x0c", "é".encode(), b"\xff", b"x"]),
    max_size=40,
).map(b"".join) | st.binary(max_size=120)


@settings(max_examples=300, deadline=None)
@given(
    data=ndjson_bytes,
    points=st.lists(st.integers(0, 200), max_size=6),
    bound=st.sampled_from([4, 16, 4 << 20]),
)
def test_ndjson_matches_oracle(data: bytes, points: list[int], bound: int) -> None:
    pieces = cut(data, [p for p in points if p <= len(data)])
    native = run_ndjson(_native.NdjsonParser(bound), pieces)
    assert native == run_ndjson(oracle.NdjsonParser(bound), pieces)
    if native[1] is None:
        assert native == run_ndjson(_native.NdjsonParser(bound), [data])
