"""Shared CLI plumbing: loading config and the store once per command, and turning BlazarError into one red line.

It owns no command; each command group lives in its own module.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import apsw
import typer
from rich.console import Console
from rich.markup import escape

from blazar.config import Config, load_config
from blazar.errors import BlazarError
from blazar.paths import DataDir
from blazar.store import Store, failure

P = ParamSpec("P")
R = TypeVar("R")

# what the CLI prints is data (paths, names, templates, command lines): a name like "x:thumbs_up:" is text, not an
# emoji code, and "[/INST]" or a "[projects]" directory is text, not markup; the few styled lines ask for markup
console = Console(soft_wrap=True, emoji=False, markup=False)
err_console = Console(stderr=True, soft_wrap=True, emoji=False, markup=False)


def steps_on(out: Console) -> Callable[[str], None]:
    """A printer of the steps a command takes (``blazar: LINE``) on ``out``: stderr where stdout is an answer's."""

    def say(line: str) -> None:
        out.print(f"blazar: {line}", highlight=False, soft_wrap=True)

    return say


def warn(message: str) -> None:
    """One yellow line on stderr: the command goes on."""
    err_console.print(
        f"[yellow]warning:[/yellow] {escape(message)}", markup=True, highlight=False, soft_wrap=True
    )


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def handles_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Domain errors become one red line and exit 1; never a traceback with locals (keys live there)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except BlazarError as e:
            raise fail(str(e)) from None
        except apsw.Error as e:  # a write outside a transaction (those become StoreError there)
            raise fail(str(failure(e) or f"database error: {e}")) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

    return wrapper


def config() -> Config:
    return load_config()


@contextmanager
def opened(cfg: Config | None = None) -> Iterator[tuple[Config, DataDir, Store]]:
    cfg = cfg or config()
    data = DataDir(cfg.data_dir).ensure()
    store = Store.open(data.db, weights=data.models)  # a lost catalog is refused, naming the repair
    try:
        yield cfg, data, store
    finally:
        store.close()


def is_tty() -> bool:
    return sys.stdout.isatty()
