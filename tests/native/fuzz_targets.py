"""Atheris fuzz targets for the native parsers, run for a bounded time by test_fuzz.py.

    python -m tests.native.fuzz_targets sse  CORPUS_DIR -max_total_time=30
    python -m tests.native.fuzz_targets gguf CORPUS_DIR -max_total_time=30
    python -m tests.native.fuzz_targets http CORPUS_DIR -max_total_time=30

``sse``: the native SSE parser must agree with the Python oracle (events and errors) on the
input cut in two at a fuzzer-chosen point, and a native translator in a fuzzer-chosen dialect
must not fail except with StreamError. ``gguf``: ``parse_gguf_metadata`` must return or raise
GgufError, nothing else. ``http``: the engine relay's ``EngineLink`` fed a response cut in two never raises
from ``feed`` and settles every exchange's future exactly once. The seed corpora are committed in native/fuzz/corpus/<target>/.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from tests.oracle import frames as oracle

import contextlib

from blazar import _native
from tests.native.standins import Future, PyEmptyAwaitable

DIALECTS = ("openai", "ollama_chat", "ollama_generate", "anthropic", "responses")


def sse(data: bytes) -> None:
    if not data:
        return
    split = data[0] % (len(data) + 1)
    body = data[1:]
    pieces = [body[:split], body[split:]]
    results = []
    for parser in (_native.SseParser(64), oracle.SseParser(64)):
        events: list[tuple[str, str]] = []
        error = None
        try:
            for piece in pieces:
                events += parser.feed(piece)
        except ValueError as err:
            error = str(err)
        results.append((events, error))
    if results[0] != results[1]:
        raise AssertionError(f"native {results[0]!r} != oracle {results[1]!r}")
    tr = _native.StreamTranslator(DIALECTS[data[0] % len(DIALECTS)], "m", start_ns=0, message_id="msg_f")
    try:
        for piece in pieces:
            tr.feed(piece, now_ns=1)
    except _native.StreamError:
        pass
    tr.finish(now_ns=2)
    tr.summary()


def gguf(data: bytes) -> None:
    with contextlib.suppress(_native.GgufError):
        _native.parse_gguf_metadata(data, max_array_len=64)


def http(data: bytes) -> None:
    """The engine relay's HTTP decoder: ``feed`` never raises, and once the connection is lost every exchange
    whose head arrived has been settled exactly once (a body, the stream's end, or an error)."""
    if not data:
        return
    split = data[0] % (len(data) + 1)
    body = data[1:]
    link = _native.EngineLink()
    head, done = Future(), Future()
    link.begin(head)
    started = False
    for piece in (body[:split], body[split:]):
        link.feed(piece)
        if head.done() and head.error is None and not started:
            started = True
            if data[0] & 1:
                link.read_body(done)
            else:
                tr = _native.StreamTranslator(
                    DIALECTS[data[0] % len(DIALECTS)], "m", start_ns=0, message_id="msg_f"
                )
                link.relay(tr, lambda _b: PyEmptyAwaitable(), done)
    link.lost()
    assert head.settled == 1, "the head's future must be settled once the connection is gone"
    if started:
        assert done.settled == 1, "an exchange must end through its future"
    for err in (head.error, done.error):
        assert err is None or isinstance(err, (_native.LinkError, _native.StreamError)), err


TARGETS = {"sse": sse, "gguf": gguf, "http": http}


def main() -> None:
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
