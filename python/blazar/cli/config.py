"""`blazar config init | path`: write the commented default config.toml, and say which file is read.

Thin commands over ``blazar.config``: ``init`` writes ``render_default_config()`` with the same lock, backup and
atomic replace as ``blazar keys`` (the backups kept as the old file's ``config_backups`` says, when it can be
read); it never replaces an existing file without ``--force``, nor one its owner made read-only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from blazar.cli.common import console, fail, handles_errors
from blazar.config import CONFIG_ENV, default_config_path, load_config_text, render_default_config
from blazar.config.model import DEFAULT_CONFIG_BACKUPS
from blazar.config.write import config_lock, read_config_bytes, write_config
from blazar.errors import ConfigError

app = typer.Typer(
    help="Write the default config.toml ($BLAZAR_CONFIG, else ~/.config/blazar/config.toml), or say where it is.",
    no_args_is_help=True,
)


@app.command("init")
@handles_errors
def init_cmd(
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace an existing file (the old one is kept as a timestamped .bak)."),
    ] = False,
) -> None:
    """Write config.toml holding every top-level default, each with a comment saying what it does."""
    path = default_config_path()
    with config_lock(path):
        old = read_config_bytes(path)
        if old is not None and not force:
            raise fail(f"{path} already exists; pass --force to replace it (the old file is kept as a .bak)")
        bak = write_config(path, render_default_config(), old, keep_backups=_backups_kept(path, old))
    kept = f"; the old file is kept as {bak}" if bak is not None else ""
    console.print(f"wrote the default config to {path}{kept}", highlight=False)


def _backups_kept(path: Path, old: bytes | None) -> int:
    """The old file's ``config_backups``; the default when there is none or it cannot be read (a broken file is
    a reason to run ``init --force``)."""
    if old is None:
        return DEFAULT_CONFIG_BACKUPS
    try:
        return load_config_text(old.decode("utf-8-sig"), path).config_backups
    except (ConfigError, UnicodeDecodeError):
        return DEFAULT_CONFIG_BACKUPS


@app.command("path")
@handles_errors
def path_cmd() -> None:
    """Print the config file's path ($BLAZAR_CONFIG, else the default), and whether it exists."""
    path = default_config_path()
    named = bool(os.environ.get(CONFIG_ENV))
    if path.is_dir():
        state = " (a directory, not a file: every command refuses to start until it is a config file)"
    elif path.is_file():
        state = ""
    elif named:  # the other commands refuse a config they were told to read and cannot
        state = f" (absent: set by {CONFIG_ENV}, so the other commands refuse to start; blazar config init writes it)"
    else:
        state = " (absent: the built-in defaults apply)"
    console.print(f"{path}{state}", highlight=False)
