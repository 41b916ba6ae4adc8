"""`blazar log`: the daemon's log (``logs/blazar.log``, which every ``blazar serve`` writes), filtered and followed.

An entry is a line ``DATE TIME LEVEL LOGGER: MESSAGE`` and the lines after it that start otherwise (a traceback).
``--level`` keeps entries at that level or above; ``--model`` those that name the model (``name`` or
``name:tag``); ``--follow`` keeps printing what the daemon logs. On a terminal the level is coloured (``NO_COLOR``
turns that off); piped, the lines are as written.

The entries so far come from the file, so they need no daemon. ``--follow`` reads the running daemon's
``/api/events`` (its ``log`` events are the records the file gets, line for line, and the status page shows the
same), which also follows a daemon on another host (``--host``, with ``--api-key`` when it has keys); with no
daemon to ask, or one that refuses the key, it follows the file, across a rotation, and it goes on with the file
when the daemon stops.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated

import httpx
import orjson
import typer

from blazar.catalog import names
from blazar.cli.client import ApiKey, Host, Port, address, client
from blazar.cli.common import config, handles_errors
from blazar.errors import BlazarError
from blazar.paths import DataDir

LEVELS = ("debug", "info", "warning", "error", "critical")
_RANK = {name.upper(): i for i, name in enumerate(LEVELS)}
_HEAD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
_COLOURS = {"WARNING": "yellow", "ERROR": "red", "CRITICAL": "red", "DEBUG": "bright_black"}
FOLLOW_POLL_SECS = 0.25


class LogError(BlazarError):
    """The daemon log cannot be read; the message says what to run."""


def entries(lines: Iterable[str]) -> Iterator[str]:
    """Whole entries (a head line and its continuation lines, joined by newlines) from ``lines``."""
    current: list[str] = []
    for line in lines:
        if _HEAD.match(line) and current:
            yield "\n".join(current)
            current = []
        current.append(line)
    if current:
        yield "\n".join(current)


def level_of(entry: str) -> str | None:
    m = _HEAD.match(entry)
    return m.group(1) if m else None


def model_pattern(model: str) -> re.Pattern[str]:
    """What names ``model`` in a log line: ``name:tag``, and for the ``latest`` tag the bare name too."""
    full = names.normalize(model)
    base, _, tag = full.rpartition(":")
    body = re.escape(base) + (f"(?::{re.escape(tag)})?" if tag == "latest" else f":{re.escape(tag)}")
    return re.compile(rf"(?<![\w.:/-]){body}(?![\w.:/-])")


def keep(entry: str, level: str | None, model: re.Pattern[str] | None) -> bool:
    if level is not None:
        have = level_of(entry)
        if have is None or _RANK[have] < _RANK[level.upper()]:
            return False
    return model is None or model.search(entry) is not None


def shown(entry: str, colour: bool) -> str:
    if not colour:
        return entry
    have = level_of(entry)
    hue = _COLOURS.get(have or "")
    if hue is None or have is None:
        return entry
    at = entry.index(f" {have} ") + 1
    return entry[:at] + typer.style(have, fg=hue, bold=have != "DEBUG") + entry[at + len(have) :]


EVENTS_PATH = "/api/events"  # gateway/status.py's (the CLI does not import the gateway to start)
STREAM_TIMEOUT = httpx.Timeout(10.0, read=30.0)
"""A status event comes every second: 30 s of nothing is a daemon that has stopped answering."""


def _subscribe(url: str, api_key: str | None) -> tuple[httpx.Client, httpx.Response] | str:
    """The daemon's event stream, open; else why not, in a line."""
    c = client(url, api_key, timeout=STREAM_TIMEOUT)
    try:
        r = c.send(c.build_request("GET", EVENTS_PATH), stream=True)
    except httpx.TransportError as e:
        c.close()
        return f"no daemon answers at {url} ({type(e).__name__})"
    if r.status_code != 200:
        r.read()
        r.close()
        c.close()
        why = (
            "needs a full-access key: pass one with --api-key or BLAZAR_API_KEY"
            if r.status_code in (401, 403)
            else f"answered {r.status_code}"
        )
        return f"the daemon's {EVENTS_PATH} {why}"
    return c, r


def _follow_events(
    r: httpx.Response, seen: set[str], level: str | None, model: re.Pattern[str] | None, colour: bool
) -> set[str]:
    """Print each ``log`` event of the stream until it ends, skipping at first the entries already printed from
    the file (the stream opened before the file was read); the entries printed, for the file to skip after."""
    printed: set[str] = set()
    catching_up = True
    kind = ""
    try:
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "log":
                entry = str(orjson.loads(line[6:]).get("line", ""))
                if catching_up and entry in seen:
                    continue
                catching_up = False
                printed.add(entry)
                if keep(entry, level, model):
                    typer.echo(shown(entry, colour))
                    sys.stdout.flush()
    except (httpx.TransportError, orjson.JSONDecodeError):
        pass  # the daemon went or stopped answering: the caller says so
    return printed


def _follow(
    path: Path,
    start: int,
    level: str | None,
    model: re.Pattern[str] | None,
    colour: bool,
    skip: set[str] | None = None,
) -> None:
    """Print what is written to ``path`` from byte ``start`` on, until interrupted, but the entries in ``skip``
    (printed already from the daemon's events); a rotation (another file under the name, or a shorter one) is
    read from its start."""
    ident = os.stat(path).st_ino
    offset, pending = start, ""
    while True:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            time.sleep(FOLLOW_POLL_SECS)
            continue
        if st.st_ino != ident or st.st_size < offset:
            ident, offset = st.st_ino, 0
        if st.st_size > offset:
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            offset += len(data)
            text = pending + data.decode("utf-8", errors="replace")
            complete, _, pending = text.rpartition("\n")
            for entry in entries(complete.split("\n") if complete else []):
                if skip and entry in skip:
                    skip.discard(entry)
                    continue
                if keep(entry, level, model):
                    typer.echo(shown(entry, colour))
            sys.stdout.flush()
        else:
            time.sleep(FOLLOW_POLL_SECS)


@handles_errors
def log_cmd(
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing what the daemon logs.")
    ] = False,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Only entries that name this model.")
    ] = None,
    level: Annotated[
        str | None,
        typer.Option("--level", "-l", help="Only entries at this level or above: " + ", ".join(LEVELS)),
    ] = None,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many entries to show first.", min=0)] = 100,
    host: Host = None,
    port: Port = None,
    api_key: ApiKey = None,
) -> None:
    """Show the daemon's log (engines started and stopped, crashes, sentinel findings, update notices); with
    --follow, what it logs from then on, from the running daemon (here or at --host) or its log file."""
    if level is not None and level.lower() not in LEVELS:
        raise LogError(f"--level must be one of {', '.join(LEVELS)}, not '{level}'")
    pattern = None
    if model is not None:
        names.check(model)
        pattern = model_pattern(model)
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    stream = (
        _subscribe(address(host, port), api_key) if follow else None
    )  # before the file: nothing falls between
    path = DataDir(config().data_dir).daemon_log
    have_file = path.is_file()
    if not have_file and not isinstance(stream, tuple):
        raise LogError(
            f"no daemon log at {path} yet: start the daemon with `blazar serve` (or `blazar run MODEL`)"
            + (f"; {stream}" if stream else "")
        )
    data = path.read_bytes() if have_file else b""
    data = data[: data.rfind(b"\n") + 1]  # a line being written is --follow's to print whole
    text = data.decode("utf-8", errors="replace").splitlines()
    kept = deque((e for e in entries(text) if keep(e, level, pattern)), maxlen=lines)
    for entry in kept:
        typer.echo(shown(entry, colour))
    if not follow:
        return
    sys.stdout.flush()
    try:
        skip: set[str] = set()
        if isinstance(stream, tuple):
            c, r = stream
            try:
                skip = _follow_events(r, set(entries(text[-1000:])), level, pattern, colour)
            finally:
                r.close()
                c.close()
            if not path.is_file():
                typer.echo("the daemon's event stream ended (the daemon stopped?)", err=True)
                return
        elif stream:
            typer.echo(f"following {path}: {stream}", err=True)
        _follow(path, len(data), level, pattern, colour, skip)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
