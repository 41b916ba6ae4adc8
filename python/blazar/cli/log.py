"""`blazar log`: the daemon's log (``logs/blazar.log``, which every ``blazar serve`` writes), filtered and followed.

An entry is a line ``DATE TIME LEVEL LOGGER: MESSAGE`` and the lines after it that start otherwise (a traceback).
``--level`` keeps entries at that level or above; ``--model`` those that name the model (``name`` or
``name:tag``); ``--follow`` keeps printing as the daemon writes, across a rotation. On a terminal the level is
coloured (``NO_COLOR`` turns that off); piped, the lines are as written. Reads the file only: it needs no daemon.
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

import typer

from blazar.catalog import names
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


def _follow(path: Path, start: int, level: str | None, model: re.Pattern[str] | None, colour: bool) -> None:
    """Print what is written to ``path`` from byte ``start`` on, until interrupted; a rotation (another file
    under the name, or a shorter one) is read from its start."""
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
) -> None:
    """Show the daemon's log (engines started and stopped, crashes, sentinel findings, update notices)."""
    if level is not None and level.lower() not in LEVELS:
        raise LogError(f"--level must be one of {', '.join(LEVELS)}, not '{level}'")
    pattern = None
    if model is not None:
        names.check(model)
        pattern = model_pattern(model)
    path = DataDir(config().data_dir).daemon_log
    if not path.is_file():
        raise LogError(
            f"no daemon log at {path} yet: start the daemon with `blazar serve` (or `blazar run MODEL`)"
        )
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    data = path.read_bytes()
    data = data[: data.rfind(b"\n") + 1]  # a line being written is --follow's to print whole
    text = data.decode("utf-8", errors="replace").splitlines()
    kept = deque((e for e in entries(text) if keep(e, level, pattern)), maxlen=lines)
    for entry in kept:
        typer.echo(shown(entry, colour))
    if follow:
        sys.stdout.flush()
        try:
            _follow(path, len(data), level, pattern, colour)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None
