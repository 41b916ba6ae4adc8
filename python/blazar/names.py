"""Model names: ``name:tag`` with ``:latest`` as the default tag. Pure functions, no I/O."""

from __future__ import annotations

import re

from blazar.errors import CatalogError
from blazar.paths import safe_component

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


MAX_NAME = 200
MAX_FILE_NAME = 215
"""The longest a name may be as a file name (``safe_component``): file systems take 255 bytes, less what files add
to it (a tag, ``.gguf``, a daemon's pid and ``.apikey`` under ``run/``)."""
"""The longest model name (name:tag) the catalog takes."""


def normalize(name: str) -> str:
    """'smollm2' -> 'smollm2:latest'; 'smollm2:q4' stays; invalid names raise CatalogError."""
    name = name.strip()
    base, sep, tag = name.rpartition(":")
    if not sep:
        base, tag = name, "latest"
    if len(base) > MAX_NAME or len(tag) > MAX_NAME:  # the name and the tag alike: normalizing twice agrees
        long = max(len(base), len(tag))
        raise CatalogError(
            f"invalid model name '{name[:40]}...': it is {long} characters long; use at most {MAX_NAME}"
        )
    if not _NAME.match(base) or not _TAG.match(tag) or any(seg in ("", ".", "..") for seg in base.split("/")):
        raise CatalogError(
            f"invalid model name '{name}': use name[:tag] with letters, digits, '.', '_', '-' (and '/' between parts"
            " of the name, none of them empty, '.' or '..')"
        )
    full = f"{base}:{tag}"
    on_disk = len(safe_component(full))  # each '/' and the ':' take two characters in a file name
    if on_disk > MAX_FILE_NAME:
        raise CatalogError(
            f"invalid model name '{full[:40]}...': as a file name it is {on_disk} characters long (each '/' and"
            f" ':' take two); use at most {MAX_FILE_NAME}, or fewer '/'"
        )
    return full


def default_name_for_file(stem: str) -> str:
    """A catalog name from a file stem: 'SmolLM2-135M-Instruct.Q4_1' -> 'smollm2-135m-instruct:q4_1'."""
    stem = stem.lower()
    base, dot, tag = stem.rpartition(".")
    if not dot or not tag:
        base, tag = stem, "latest"
    cleaned = re.sub(r"[^a-z0-9._/-]+", "-", base).strip("-.") or "model"
    tag = re.sub(r"[^a-z0-9._-]+", "-", tag).strip("-.") or "latest"
    return normalize(f"{cleaned}:{tag}")


def default_name_for_dir(dirname: str) -> str:
    """A catalog name from a model directory's name: 'Qwen2.5-0.5B-Instruct-AWQ' -> 'qwen2.5-0.5b-instruct-awq:latest'."""
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", dirname.lower()).strip("-.") or "model"
    return normalize(f"{cleaned[: MAX_NAME - 7]}:latest")
