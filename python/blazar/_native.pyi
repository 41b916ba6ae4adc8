"""Typed interface of the compiled ``blazar._native`` extension (Rust, pyo3; source in ``native/``)."""

import os
from collections.abc import Sequence
from typing import Self, final

__all__ = [
    "EngineLink",
    "GgufArray",
    "GgufError",
    "LinkError",
    "NdjsonParser",
    "SemanticIndex",
    "SseParser",
    "StreamError",
    "StreamTranslator",
    "parse_gguf_metadata",
    "pool_token_spans",
    "read_gguf_metadata",
    "translate_whole",
]

class GgufError(ValueError):
    """Raised when data is not a well-formed GGUF header (bad magic, unsupported version,
    truncation, invalid value type, ...). The message names what was being read and the offset."""

@final
class GgufArray:
    """A metadata array longer than ``max_array_len``: its item type and length, not its items.

    Instances are immutable, hashable and compare equal by value; they cannot be built from Python.
    """

    @property
    def item_type(self) -> str:
        """GGUF item type name: "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64" or "float64"."""
    @property
    def length(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def parse_gguf_metadata(data: bytes, max_array_len: int = 1024, tensors: bool = False) -> dict[str, object]:
    """Parse the header region of a GGUF file held in ``data``; tensor data is never read.

    Returns ``{"version": int, "tensor_count": int, "metadata_kv_count": int,
    "metadata": dict[str, object], "parameter_count": int, "tensor_types": dict[str, int],
    "header_size": int, "max_tensor_offset": int}``. Metadata values are ``int``, ``float``,
    ``bool``, ``str`` (invalid UTF-8 replaced by U+FFFD) or ``list`` of those; arrays longer than
    ``max_array_len`` become :class:`GgufArray`. ``tensor_types`` counts tensors per ggml type name ("F32", "Q4_K", ...,
    or "type<N>" when unknown); ``header_size`` is the offset where the tensor infos end;
    ``max_tensor_offset`` the largest tensor data offset, relative to the data section, which starts
    at ``header_size`` rounded up to ``general.alignment`` (default 32).

    With ``tensors``, ``"tensors"`` lists every tensor info in file order as
    ``{"name": str, "type": str, "shape": list[int]}`` (type as in ``tensor_types``; shape innermost
    dimension first, as ggml stores it).

    Raises :class:`GgufError` for malformed data and ``ValueError`` if ``max_array_len < 0``.
    """

def read_gguf_metadata(
    path: str | os.PathLike[str], max_array_len: int = 1024, tensors: bool = False
) -> dict[str, object]:
    """Like :func:`parse_gguf_metadata` on the file at ``path``, which is memory-mapped so only
    its header pages are read. The GIL is released while the header is parsed.

    Raises ``OSError`` (``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``, ...)
    when the file cannot be opened or mapped, and :class:`GgufError` for malformed contents.
    """

# ---- streaming core (native/src/frame, native/src/translate) --------------------------------

class StreamError(ValueError):
    """Raised for a byte stream that cannot be framed (a line or event over the 4 MiB bound, a
    line that is not UTF-8) and by :func:`translate_whole` for an engine body that is not a UTF-8
    JSON chat completion. After a stream error a translator's ``feed`` keeps raising; call its
    ``finish`` to get the held-back bytes and the closing error in the client's dialect."""

@final
class SseParser:
    """Incremental Server-Sent Events parser over bytes (WHATWG rules: LF, CRLF and CR line ends
    across any chunk boundary, comments, ``event:``, multi-line ``data:``, a leading BOM).
    llama.cpp's ``error: ...`` line is reported as an event of type ``"error"``."""

    def __new__(cls, max_frame: int = 4194304) -> Self: ...
    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """``(event type, data)`` for each event ``chunk`` completes; the type is ``"message"``
        when the stream named none. Raises :class:`StreamError`."""
    def finish(self) -> bool:
        """End of stream: an incomplete event is discarded. True when nothing was discarded."""

@final
class NdjsonParser:
    """Incremental newline-delimited JSON splitter: lines (without CR/LF), blank lines skipped."""

    def __new__(cls, max_frame: int = 4194304) -> Self: ...
    def feed(self, chunk: bytes) -> list[str]:
        """The lines ``chunk`` completes. Raises :class:`StreamError`."""
    def finish(self) -> list[str]:
        """End of stream: the last line if it had no LF."""

@final
class StreamTranslator:
    """One streamed response: the engine's OpenAI-dialect SSE bytes in, the client's bytes out.

    ``dialect`` is ``"openai"`` (pass-through with ``model`` rewritten and llama.cpp's
    ``__verbose`` member cut out; the usage-only chunk dropped unless ``include_usage``), ``"ollama_chat"`` / ``"ollama_generate"`` (NDJSON objects,
    complete ``tool_calls`` with object arguments, the final ``done: true`` object with
    durations in ns), ``"anthropic"`` (Messages API SSE events, a ``ping`` after
    ``message_start`` and after 10 s without output) or ``"responses"`` (OpenAI's Responses API:
    ``response.*`` events with their ``sequence_number``, ``output_index`` and ``content_index``;
    reasoning, message and function_call output items; ``response.completed``, or
    ``response.incomplete`` at the token bound, or ``response.failed``; ``message_id`` is then the
    response id, by default a fresh ``resp_...``, and ``echo`` the request's members every response
    object repeats, as JSON object members without braces). Any other value raises ``ValueError``.

    Time is Unix-epoch nanoseconds: the clock starts at ``start_ns`` (default: now) and each call
    may pass ``now_ns``; with both given, output is fully deterministic. ``load_duration_ns`` is
    reported as Ollama's ``load_duration`` (and added to ``total_duration``);
    ``prompt_tokens_hint`` stands in for the prompt token count until the engine reports usage
    (Anthropic's ``message_start``); llama.cpp's ``prompt_progress`` chunks (``return_progress``)
    replace it with the prompt's real size, start Anthropic's message at once, and are relayed to no
    dialect. ``message_id`` defaults to a fresh ``msg_...`` id. ``redact`` (a credential the upstream
    may quote) is cut out of the engine errors relayed and of the summary's ``engine_error``.
    ``prefill`` (the assistant message the conversation ends with, which llama-server repeats at the
    start of its answer) is cut from the start of the content; content that departs from it ends the
    cut there, in each choice. ``alternatives`` False (the client asked for logprobs with
    top_logprobs 0, and the engine for one alternative, the fewest it gives with logprobs) cuts
    each token's ``top_logprobs``: an empty list for OpenAI, no member for Ollama. ``forced_call``
    (the tools a forced call may name) reads the engine's content as the constrained JSON
    ``{"name", "arguments"}`` and relays it as that tool call, streamed: the call's id and name first
    (with the first chunk when one tool is named, else once the name is complete), then each piece of
    the arguments as it comes, finish ``tool_calls``. Usage adds up every report the engine sends (llama-server reports each choice and
    each prompt on its own), each prompt's tokens counted once for its ``n`` choices; an OpenAI
    client asking for usage gets one usage chunk, before ``[DONE]``. The summary's ``choices`` is
    the highest choice index seen plus one, ``usage_reports`` how many reports were added up,
    ``token_chunks`` how many chunks carried text, reasoning or tool-call pieces (about the tokens
    generated: what a stream cut off before its usage report is charged).
    """

    def __new__(
        cls,
        dialect: str,
        model: str,
        *,
        include_usage: bool = False,
        load_duration_ns: int = 0,
        message_id: str | None = None,
        prompt_tokens_hint: int = 0,
        start_ns: int | None = None,
        redact: str | None = None,
        prefill: str | None = None,
        n: int = 1,
        echo: str | None = None,
        alternatives: bool = True,
        forced_call: list[str] | None = None,
    ) -> Self: ...
    def feed(self, chunk: bytes, now_ns: int | None = None) -> bytes:
        """Engine bytes in (any chunking), client bytes out (possibly empty). An empty chunk
        only checks the Anthropic keep-alive: call ``feed(b"")`` from a timer to get pings while
        the engine is silent. Raises :class:`StreamError` on a framing error."""
    def finish(self, now_ns: int | None = None) -> bytes:
        """End of upstream: the closing bytes (``data: [DONE]``, Ollama's final object, Anthropic's
        ``message_delta``/``message_stop``), or the dialect's error event when the engine stopped
        before finishing or the stream failed. Idempotent: later calls return ``b""``."""
    def abort(self, message: str, now_ns: int | None = None) -> bytes:
        """End the response early with ``message`` as the dialect's in-stream error event
        (``b""`` if already closed)."""
    def summary(self) -> dict[str, object]:
        """What the response amounted to: ``{"text": str, "reasoning": str, "tool_calls":
        [{"index": int, "id": str | None, "type": "function", "function": {"name": str,
        "arguments": str}}], "finish_reason": str | None, "stop_sequence": str | None, "usage":
        {"prompt_tokens": int, "completion_tokens": int} | None, "ttft_ms": float | None,
        "tpot_ms": {"count": int, "mean": float, "p50": float, "p90": float, "p99": float,
        "max": float} | None, "chunks": int, "errors": list[str], "engine_error": str | None}``. ``stop_sequence`` is the
        stop string the engine says it stopped on (llama.cpp's ``__verbose`` with ``stop_type``
        "word", or a choice's ``stop_reason`` string), in every dialect; ``finish_reason`` stays the
        engine's. ``tpot_ms`` describes the gaps between token-bearing chunks; ``errors`` lists
        malformed chunks and tool-call fragments, engine errors and abnormal ends; ``engine_error``
        is the engine's own message when it answered with an error object."""
    @property
    def done(self) -> bool:
        """True once the engine's ``[DONE]`` was seen or the stream was closed."""

def translate_whole(
    dialect: str,
    model: str,
    engine_body: bytes,
    *,
    load_duration_ns: int = 0,
    message_id: str | None = None,
    total_duration_ns: int = 0,
    now_ns: int | None = None,
    prefill: str | None = None,
    n: int = 1,
    echo: str | None = None,
    alternatives: bool = True,
) -> tuple[bytes, dict[str, object]]:
    """A whole non-streamed engine ``chat.completion`` body to the client's body, with the same
    summary as :meth:`StreamTranslator.summary` (``ttft_ms`` and ``tpot_ms`` are None). Ollama's
    eval durations come from llama.cpp's ``timings``. An engine ``{"error": ...}`` body becomes
    the dialect's error body; ``prefill`` and ``alternatives`` as for :class:`StreamTranslator`. Raises
    :class:`StreamError` for a body that is not a UTF-8 JSON object and ``ValueError`` for an
    unknown dialect."""

# ---- late chunking (native/src/pool) ---------------------------------------------------------

def pool_token_spans(body: bytes, spans: Sequence[tuple[int, int]]) -> list[bytes]:
    """Late chunking: ``body`` is llama-server's ``/embeddings`` answer for one input on an engine
    started with ``--pooling none`` (``[{"index": 0, "embedding": [[f32, ...], ...]}]``, one vector
    per token). For each ``(start, end)`` token span, the mean of those tokens' vectors,
    L2-normalised, as little-endian float32 bytes. Parsed with the GIL released. Raises
    ``ValueError`` for another shape, ragged vectors, or a span that is empty or past the last
    token."""

# ---- semantic cache index (native/src/semcache) ---------------------------------------------

@final
class SemanticIndex:
    """Top-1 cosine index over partitions (the caller names them from model, API key and lane).

    Vectors are ``dim`` floats, a sequence or ``bytes`` of little-endian float32, L2-normalised
    on insert and query. Entries live ``ttl_secs`` (``math.inf``: forever); beyond ``capacity``
    entries in all, the oldest is evicted. Searches are exact and release the GIL; the index is
    safe to share between threads. Raises ``ValueError`` for bad arguments, a wrong dimension or
    a zero/NaN vector.
    """

    def __new__(cls, dim: int, capacity: int, ttl_secs: float, threshold: float = 0.9) -> Self: ...
    def insert(self, partition: str, vector: Sequence[float] | bytes, value: bytes) -> None: ...
    def lookup(self, partition: str, vector: Sequence[float] | bytes) -> tuple[float, bytes] | None:
        """``(cosine, value)`` of the best unexpired entry with cosine >= ``threshold``."""
    def __len__(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def ttl_secs(self) -> float: ...
    @property
    def threshold(self) -> float: ...

# ---- engine relay (native/src/relay) ------------------------------------------------------------

class LinkError(Exception):
    """An engine connection failed: closed before or during its response, or not HTTP/1.1."""

@final
class EngineLink:
    """The decoding half of one pooled HTTP/1.1 connection to an engine.

    Install :meth:`feed` as the asyncio protocol's ``data_received`` (and call :meth:`eof` and
    :meth:`lost` from ``eof_received`` and ``connection_lost``). Each exchange: :meth:`begin`
    after writing a request (its future gets the status), then :meth:`read_body` or :meth:`relay`.
    Outcomes reach Python only through those futures; ``feed`` never raises.
    """

    def __new__(cls) -> Self: ...
    def begin(self, head: object) -> None:
        """A request was written; ``head`` (an asyncio future) gets the response status (int).
        Raises :class:`LinkError` when the connection closed or broke, ``ValueError`` while
        another exchange is in progress."""
    def feed(self, data: bytes) -> None: ...
    def eof(self) -> None:
        """The engine closed its side: ends a body delimited by the close; no exchange follows."""
    def lost(self, error: bool = False) -> None:
        """The connection is gone; with ``error`` (a reset) a close-delimited body fails too."""
    def read_body(self, done: object) -> None:
        """``done`` gets the whole decoded body (bytes). ``ValueError`` before the head."""
    def relay(self, translator: StreamTranslator, send: object, done: object) -> None:
        """Every body piece from now on goes through ``translator``; its output is written with
        ``send`` (Granian's ``send_bytes``). ``done`` gets None when the engine's response ended,
        or ``send``'s error awaitable when the client is gone; it fails with
        :class:`StreamError` or :class:`LinkError`. ``ValueError`` before the head."""
    def tick(self) -> float | None:
        """A timer's call while relaying: writes what the translator owes the client after a quiet
        spell (an Anthropic ``ping``) and returns the seconds since the engine last sent bytes;
        None when no stream is being relayed."""
    def abandon(self) -> None:
        """The exchange's caller gave up: drop its future and the client's ``send``."""
    @property
    def reusable(self) -> bool:
        """The last response ended cleanly and the engine keeps the connection open."""
    @property
    def got_bytes(self) -> bool:
        """Any byte of the current response arrived."""
    @property
    def closed(self) -> bool: ...
