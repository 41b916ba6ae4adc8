"""Editing the ``[[keys]]`` tables of a config document with tomlkit, keeping every comment and unrelated key.

It owns where a new key table goes, how a removed table's trailing comments (which describe what follows it)
are kept in place, and ``dropped_lines``: the check that an edit lost no line it was not meant to. It must
not read or write files, validate values (``load`` does that on the rendered text) or put any line of the
document into a message: config documents hold secrets.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable, Mapping

import tomlkit
from tomlkit.items import AoT, Array, Comment, InlineTable, Table, Whitespace
from tomlkit.toml_document import TOMLDocument

__all__ = [
    "KEYS_TABLE",
    "append_key_table",
    "dropped_lines",
    "find_key",
    "parse_document",
    "remove_key_table",
    "set_key_value",
]

KEYS_TABLE = "keys"
_NEW_FILE_HEADER = "Blazar configuration. [[keys]] entries are managed with: blazar keys add|rm|rotate|ls"


def parse_document(text: str | None) -> TOMLDocument:
    """The document for ``text``; ``None`` (no file yet) gives a new document with a one-line header comment.

    Callers validate ``text`` with ``load_config_text`` first, so it parses.
    """
    if text is None:
        doc = tomlkit.document()
        doc.add(tomlkit.comment(_NEW_FILE_HEADER))
        doc.add(tomlkit.nl())
        return doc
    return tomlkit.parse(text)


def _entries(doc: TOMLDocument) -> AoT | Array | None:
    item = doc.get(KEYS_TABLE)
    if item is None:
        return None
    if isinstance(item, AoT | Array):
        return item
    raise ValueError("'keys' is not an array of tables")  # load_config rejects this before any edit


def find_key(doc: TOMLDocument, name: str) -> int | None:
    """The index of the key table named ``name``, or ``None``."""
    entries = _entries(doc)
    if entries is None:
        return None
    for i, entry in enumerate(entries):
        if isinstance(entry, Table | InlineTable | dict) and entry.get("name") == name:
            return i
    return None


def _array_lines(doc: TOMLDocument) -> list[str]:
    """The lines of an inline ``keys = [...]`` item as written: any of them may change when one entry does."""
    alone = tomlkit.document()
    alone.append(KEYS_TABLE, copy.deepcopy(doc.item(KEYS_TABLE)))
    return alone.as_string().splitlines()


def _split_trailing(table: Table) -> tuple[int, list[Comment | Whitespace]]:
    """The index of ``table``'s last key/value and the comments and blank lines after it."""
    body = table.value.body
    last_kv = max((i for i, (k, _v) in enumerate(body) if k is not None), default=-1)
    return last_kv, [item for _k, item in body[last_kv + 1 :] if isinstance(item, Comment | Whitespace)]


def _ensure_newline(table: Table) -> None:
    """Make sure something appended after ``table`` starts on its own line (a file may lack a final newline)."""
    if not table.as_string().endswith("\n"):
        body = table.value.body
        if body:
            body[-1][1].trivia.trail += "\n"
        else:
            table.trivia.trail += "\n"


def append_key_table(doc: TOMLDocument, fields: Mapping[str, object]) -> list[str]:
    """Add a key table after the existing ones (a ``[[keys]]`` table, or an inline table if the file writes
    ``keys = [...]``). Returns the existing lines the edit may rewrite.

    The comments and blank lines after the last ``[[keys]]`` table describe what follows the array, so they
    move to after the new table.
    """
    entries = _entries(doc)
    if isinstance(entries, Array):
        vanishing = _array_lines(doc)
        inline = tomlkit.inline_table()
        inline.update(fields)
        entries.append(inline)
        return vanishing
    table = tomlkit.table()
    for key, value in fields.items():
        table.add(key, value)
    if entries is None:
        aot = tomlkit.aot()
        aot.append(table)
        doc.append(KEYS_TABLE, aot)
        return []
    if entries.body:
        last = entries.body[-1]
        last_kv, trailing = _split_trailing(last)
        del last.value.body[last_kv + 1 :]  # only unkeyed items: no index in the table's key map moves
        _ensure_newline(last)
        table.trivia.indent = "\n"
        for item in trailing:
            table.add(item)
    entries.append(table)
    return []


def set_key_value(doc: TOMLDocument, name: str, key: str, value: object) -> list[str]:
    """Set ``key`` in the key table named ``name`` (which must exist), keeping its comments. Returns the
    lines of that table as they were (the edit may rewrite any of them)."""
    entries = _entries(doc)
    index = find_key(doc, name)
    assert entries is not None and index is not None
    if isinstance(entries, Array):
        vanishing = _array_lines(doc)
    else:
        vanishing = _render_alone(entries.body[index]).splitlines()
    entries[index][key] = value
    return vanishing


def _render_alone(table: Table, *, trailing: bool = True) -> str:
    """The text a ``[[keys]]`` table renders to on its own, with or without its trailing comments."""
    table = copy.deepcopy(table)
    table.trivia.indent = ""
    if not trailing:
        last_kv, _rest = _split_trailing(table)
        del table.value.body[last_kv + 1 :]
    alone = tomlkit.document()
    aot = tomlkit.aot()
    aot.append(table)
    alone.append(KEYS_TABLE, aot)
    return alone.as_string()


def remove_key_table(doc: TOMLDocument, name: str) -> list[str]:
    """Remove the key table named ``name`` (which must exist); returns the lines that may go with it.

    A ``[[keys]]`` table's trailing comments and blank lines sit before whatever follows it, so they are kept
    in that place: before the next key table's header, at the end of the previous key table, or (for the
    only table) where the array was.
    """
    entries = _entries(doc)
    index = find_key(doc, name)
    assert entries is not None and index is not None
    if isinstance(entries, Array):
        vanishing = _array_lines(doc)
        del entries[index]
        return vanishing
    table = entries.body[index]
    vanishing = _render_alone(table, trailing=False).splitlines()
    _last_kv, trailing = _split_trailing(table)
    kept = table.trivia.indent + "".join(item.as_string() for item in trailing)
    if index + 1 < len(entries.body):
        following = entries.body[index + 1]
        following.trivia.indent = kept + following.trivia.indent
        del entries[index]
    elif index > 0:
        del entries[index]
        previous = entries.body[index - 1]
        _ensure_newline(previous)
        previous.add(Whitespace(kept))
    else:
        position = next(i for i, (_k, v) in enumerate(doc.body) if v is entries)
        del doc[KEYS_TABLE]
        # Deleting leaves a placeholder at the same position; the kept text takes its slot.
        doc.body[position] = (None, Whitespace(kept))
    return vanishing


def dropped_lines(old_text: str, new_text: str, may_vanish: Iterable[str] = ()) -> int:
    """How many non-blank lines of ``old_text`` are missing from ``new_text`` beyond ``may_vanish``.

    Lines compare with surrounding whitespace stripped; each line counts as often as it appears.
    """
    old = Counter(line.strip() for line in old_text.splitlines() if line.strip())
    new = Counter(line.strip() for line in new_text.splitlines() if line.strip())
    allowed = Counter(line.strip() for line in may_vanish if line.strip())
    missing = old - new - allowed
    return sum(missing.values())
