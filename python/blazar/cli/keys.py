"""`blazar keys ...`: add, remove, rotate and list API keys in config.toml (``$BLAZAR_CONFIG`` when set).

Thin commands over ``blazar.tenancy.keys``; a new secret is printed once, to stdout, and never again. It must not
print a secret anywhere else, or touch the data dir.
"""

from __future__ import annotations

from typing import Annotated

import typer

from blazar.cli.common import console, handles_errors
from blazar.config import default_config_path
from blazar.config.checks import INT64_MAX
from blazar.tenancy import keys

app = typer.Typer(
    help="Manage API keys in config.toml ($BLAZAR_CONFIG, else ~/.config/blazar/config.toml).",
    no_args_is_help=True,
)

_APPLY_NOTE = "a running `blazar serve` applies it when restarted"


def _limit_text(value: int) -> str:
    return str(value) if value else "-"


@app.command("add")
@handles_errors
def add_cmd(
    name: Annotated[str, typer.Argument(help="Unique key name: letters, digits, '.', '_' and '-'.")],
    models: Annotated[
        str | None,
        typer.Option(help="Comma-separated models the key may use (name:tag); omit for full access + admin."),
    ] = None,
    rpm: Annotated[int, typer.Option(min=0, max=INT64_MAX, help="Requests per minute; 0 = unlimited.")] = 0,
    tpm: Annotated[
        int, typer.Option(min=0, max=INT64_MAX, help="Prompt + completion tokens per minute; 0 = unlimited.")
    ] = 0,
    daily_tokens: Annotated[
        int, typer.Option(min=0, max=INT64_MAX, help="Tokens per UTC day; 0 = unlimited.")
    ] = 0,
    max_concurrent: Annotated[
        int, typer.Option(min=0, max=INT64_MAX, help="Requests in flight at once; 0 = unlimited.")
    ] = 0,
    weight: Annotated[float, typer.Option(help="Fair-share weight under contention, > 0.")] = 1.0,
) -> None:
    """Add a key and print its new secret (shown once only)."""
    # "a, b": the spaces are the list's, not the names'
    scoped = [] if models is None else [m.strip() for m in models.split(",") if m.strip()]
    if models is not None and not scoped:  # an empty --models "$UNSET" must not make a full-access key
        raise typer.BadParameter(
            "names no model; list the models the key may use, or leave --models out for full access",
            param_hint="--models",
        )
    path = default_config_path()
    key, secret = keys.add_key(
        path,
        name,
        scoped,
        weight=weight,
        max_concurrent=max_concurrent,
        rpm=rpm,
        tpm=tpm,
        daily_tokens=daily_tokens,
    )
    scope = "full access" if key.full_access else "models " + ", ".join(key.models)
    console.print(f"added key '{key.name}' ({scope}) to {path}; {_APPLY_NOTE}", highlight=False)
    console.print(f"secret: {secret}", highlight=False)
    console.print("store it now: it is not shown again (blazar keys rotate makes a new one)", highlight=False)


@app.command("rm")
@handles_errors
def rm_cmd(
    name: Annotated[str, typer.Argument(help="Name of the key to remove.")],
    disable_auth: Annotated[
        bool,
        typer.Option(help="Allow removing the last key, which turns authentication off."),
    ] = False,
) -> None:
    """Remove a key; its secret stops working."""
    path = default_config_path()
    key = keys.remove_key(path, name, allow_auth_off=disable_auth)
    console.print(f"removed key '{key.name}' from {path}; {_APPLY_NOTE}", highlight=False)


@app.command("rotate")
@handles_errors
def rotate_cmd(name: Annotated[str, typer.Argument(help="Name of the key to give a new secret.")]) -> None:
    """Give a key a new secret and print it (shown once only); the old secret stops working."""
    path = default_config_path()
    key, secret = keys.rotate_key(path, name)
    console.print(f"rotated key '{key.name}' in {path}; {_APPLY_NOTE}", highlight=False)
    console.print(f"secret: {secret}", highlight=False)
    console.print("store it now: it is not shown again", highlight=False)


@app.command("ls")
@handles_errors
def ls_cmd() -> None:
    """List keys with their scopes and limits; secrets are redacted."""
    path = default_config_path()
    listing = keys.list_keys(path)
    if not listing:
        console.print(
            f"no keys in {path}: the gateway is open to anyone who can reach it. "
            "Add the first with: blazar keys add admin",
            highlight=False,
        )
        return
    rows = [("NAME", "SECRET", "MODELS", "WEIGHT", "MAX_CONC", "RPM", "TPM", "DAILY", "SOURCE")]
    for k in listing:
        rows.append(
            (
                k.name,
                k.secret,
                ",".join(k.models) if k.models else "* (admin)",
                f"{k.weight:g}",
                _limit_text(k.limits.max_concurrent),
                _limit_text(k.limits.rpm),
                _limit_text(k.limits.tpm),
                _limit_text(k.limits.daily_tokens),
                k.source,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        console.print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), highlight=False
        )
