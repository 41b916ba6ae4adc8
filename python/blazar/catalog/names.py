"""Model names: ``name:tag`` with ``:latest`` as the default tag. Pure functions, no I/O."""

from __future__ import annotations

import re
import unicodedata

from blazar.errors import CatalogError
from blazar.paths import safe_component

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


MAX_NAME = 200
MAX_FILE_NAME = 215
"""The longest a name may be as a file name (``safe_component``): file systems take 255 bytes, less what files add
to it (a tag, ``.gguf``, a daemon's pid and ``.apikey`` under ``run/``)."""
"""The longest model name (name:tag) the catalog takes."""


_CALLED = {
    "\t": "a tab",
    "\n": "a line feed",
    "\x0b": "a vertical tab",
    "\x0c": "a form feed",
    "\r": "a carriage return",
    "\x00": "a null character",
    "\x1b": "an escape character",
    "\x7f": "a delete character",
    "\x85": "a next line",
    " ": "a space",
    "\u00a0": "a no-break space",
    "\u2028": "a line separator",
    "\u2029": "a paragraph separator",
    "\ufeff": "a byte order mark",
}
_OTHER = {"Cc": "a control character", "Cf": "a format character", "Co": "a private-use character",
          "Cs": "a surrogate", "Cn": "an unassigned character"}  # fmt: skip
_SHOWN = 80
"""The most characters of a refused name a message repeats."""


def _unseen(c: str) -> bool:
    """A character a name may not hold anywhere: any Unicode whitespace, or one that prints nothing (category C:
    control and format characters, and the private-use, surrogate and unassigned ones)."""
    return c.isspace() or not c.isprintable()


def escaped(name: str) -> str:
    """``name`` as a message repeats it: on one line, every invisible character escaped as Python writes it
    (``\\n``, ``\\xa0``, ``\\u2028``); a space stays a space."""
    return repr(name)[1:-1]


def shown(name: str) -> str:
    """``escaped``, cut to its first 40 characters and '...' when it is longer than ``_SHOWN``."""
    text = escaped(name)
    return text if len(text) <= _SHOWN else text[:40] + "..."


def _called(c: str) -> str:
    if c in _CALLED:
        return _CALLED[c]
    what = unicodedata.name(c, "").lower()
    if not what:
        return _OTHER.get(unicodedata.category(c), "an invisible character")
    return f"{'an' if what[0] in 'aeiou' else 'a'} {what}"


def check(name: str) -> str:
    """``name`` unchanged when it holds no whitespace or control character; else a CatalogError (a 400) naming
    the first such character. Names are taken exactly: nothing is trimmed, so ``'smollm2\\n'`` is never
    ``smollm2``. Every name a client gives is held to it: the catalog's (``normalize``) and a remote's
    ``remote:model``, which is passed on as it is."""
    if name.isprintable() and " " not in name:  # the common case, in C
        return name
    if _unseen(name[0]):
        where, c = "starts with", name[0]
    elif _unseen(name[-1]):
        where, c = "ends with", name[-1]
    else:
        where, c = "contains", next(c for c in name if _unseen(c))
    raise CatalogError(
        f"invalid model name '{shown(name)}': it {where} U+{ord(c):04X} ({_called(c)}); names take no spaces or"
        " control characters"
    )


def normalize(name: str) -> str:
    """'smollm2' -> 'smollm2:latest'; 'smollm2:q4' stays; invalid names raise CatalogError. The name is taken as
    it is given: a space or control character anywhere in it is refused (``check``), never trimmed."""
    check(name)
    base, sep, tag = name.rpartition(":")
    if not sep:
        base, tag = name, "latest"
    if len(base) > MAX_NAME or len(tag) > MAX_NAME:  # the name and the tag alike: normalizing twice agrees
        long = max(len(base), len(tag))
        raise CatalogError(
            f"invalid model name '{escaped(name[:40])}...': it is {long} characters long; use at most {MAX_NAME}"
        )
    if not _NAME.match(base) or not _TAG.match(tag) or any(seg in ("", ".", "..") for seg in base.split("/")):
        raise CatalogError(
            f"invalid model name '{escaped(name)}': use name[:tag] with letters, digits, '.', '_', '-' (and '/' between parts"
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


def normalized_or_none(text: str) -> str | None:
    """``text`` as a catalog name (``normalize``), or None where it is none (a Hub reference, a path)."""
    try:
        return normalize(text)
    except CatalogError:
        return None


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
