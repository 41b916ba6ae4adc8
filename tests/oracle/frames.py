"""Reference SSE and NDJSON framing (see ``native/src/frame``): same events, same errors."""

from __future__ import annotations

import re

MAX_FRAME = 4 << 20
_BOM = b"\xef\xbb\xbf"
_SSE_EOL = re.compile(rb"[\r\n]")


class FrameError(ValueError):
    """Same messages as the native ``StreamError``."""


def _line_too_long(limit: int, offset: int) -> FrameError:
    return FrameError(f"stream line longer than {limit} bytes (line starts at byte {offset})")


def _event_too_large(limit: int, offset: int) -> FrameError:
    return FrameError(f"stream event data larger than {limit} bytes (at byte {offset})")


def _invalid_utf8(offset: int) -> FrameError:
    return FrameError(f"stream line is not valid UTF-8 (line starts at byte {offset})")


class SseParser:
    """WHATWG event-stream parsing, plus llama.cpp's ``error:`` line as an ``error`` event."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max = max_frame
        self._partial = b""
        self._skip_lf = False
        self._first = True
        self._fed = 0
        self._data = bytearray()
        self._event = ""
        self.failed: FrameError | None = None

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """Events that ``chunk`` completes. On a FrameError the events completed before the bad
        line are on the exception as ``events`` (the translator still translates them)."""
        if self.failed is not None:
            raise self.failed
        events: list[tuple[str, str]] = []
        try:
            self._feed(chunk, events)
        except FrameError as err:
            self.failed = err
            err.events = events  # type: ignore[attr-defined]
            raise
        return events

    def _feed(self, chunk: bytes, events: list[tuple[str, str]]) -> None:
        base = self._fed
        self._fed += len(chunk)
        i, n = 0, len(chunk)
        if self._skip_lf and n:
            self._skip_lf = False
            if chunk[0] == 10:
                i = 1
        while i < n:
            m = _SSE_EOL.search(chunk, i)
            if m is None:
                start = base + i - len(self._partial)
                if len(self._partial) + n - i > self.max:
                    raise _line_too_long(self.max, start)
                self._partial += chunk[i:]
                break
            end = m.start()
            start = base + i - len(self._partial)
            line = self._partial + chunk[i:end] if self._partial else chunk[i:end]
            self._partial = b""
            if len(line) > self.max:
                raise _line_too_long(self.max, start)
            self._line(line, start, events)
            i = end + 1
            if chunk[end] == 13:
                if i < n:
                    if chunk[i] == 10:
                        i += 1
                else:
                    self._skip_lf = True

    def _line(self, line: bytes, offset: int, events: list[tuple[str, str]]) -> None:
        if self._first:
            self._first = False
            if line.startswith(_BOM):
                line = line[3:]
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid_utf8(offset) from None
        if not line:
            if self._data:
                del self._data[-1:]
                events.append((self._event or "message", self._data.decode("utf-8")))
            self._data = bytearray()
            self._event = ""
            return
        colon = line.find(b":")
        if colon == 0:
            return
        if colon < 0:
            field, value = line, b""
        else:
            field, value = line[:colon], line[colon + 1 :]
            if value.startswith(b" "):
                value = value[1:]
        if field == b"data":
            if len(self._data) + len(value) + 1 > self.max:
                raise _event_too_large(self.max, offset)
            self._data += value
            self._data += b"\n"
        elif field == b"event":
            self._event = value.decode("utf-8")
        elif field == b"error":
            events.append(("error", value.decode("utf-8")))

    def finish(self) -> bool:
        clean = not self._partial and not self._data
        self._partial = b""
        self._skip_lf = False
        self._data = bytearray()
        self._event = ""
        return clean


class NdjsonParser:
    """Lines split on LF (a CR before it dropped), blank lines skipped, last line on finish."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max = max_frame
        self._partial = b""
        self._fed = 0
        self.failed: FrameError | None = None

    def feed(self, chunk: bytes) -> list[str]:
        if self.failed is not None:
            raise self.failed
        out: list[str] = []
        base = self._fed
        self._fed += len(chunk)
        i = 0
        try:
            while i < len(chunk):
                end = chunk.find(b"\n", i)
                start = base + i - len(self._partial)
                if end < 0:
                    if len(self._partial) + len(chunk) - i > self.max:
                        raise _line_too_long(self.max, start)
                    self._partial += chunk[i:]
                    break
                line = self._partial + chunk[i:end]
                self._partial = b""
                if len(line) > self.max:
                    raise _line_too_long(self.max, start)
                self._deliver(line, start, out)
                i = end + 1
        except FrameError as err:
            self.failed = err
            raise
        return out

    def finish(self) -> list[str]:
        if self.failed is not None:
            raise self.failed
        out: list[str] = []
        line, self._partial = self._partial, b""
        try:
            self._deliver(line, self._fed - len(line), out)
        except FrameError as err:
            self.failed = err
            raise
        return out

    @staticmethod
    def _deliver(line: bytes, offset: int, out: list[str]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.strip(b" \t\n\r\x0c"):
            return
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise _invalid_utf8(offset) from None
