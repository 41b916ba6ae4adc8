"""Tests for blazar.config.edit: adding, removing and re-keying ``[[keys]]`` tables keeps every other line.

They work on strings only; each result is also parsed back to check the document means what it should.
"""

from __future__ import annotations

import tomlkit

from blazar.config.edit import (
    append_key_table,
    dropped_lines,
    find_key,
    parse_document,
    remove_key_table,
    set_key_value,
)

A, B, C = "a" * 20, "b" * 20, "c" * 20

DOC = f"""# head comment
port = 8080  # my port

# the admin key
[[keys]]  # header comment
name = "admin"
# inside admin
secret = "{A}"  # inline

# the ci key
[[keys]]
name = "ci"
secret = "{B}"
models = ["smollm2:latest"]

# per-model settings
[models."smollm2:latest"]
ctx_size = 8192  # tuned
"""


def names(text: str) -> list[str]:
    return [k["name"] for k in tomlkit.parse(text).unwrap().get("keys", [])]


def test_parse_document_without_a_file_has_a_header() -> None:
    text = parse_document(None).as_string()
    assert text.startswith("# Blazar configuration.")
    assert tomlkit.parse(text).unwrap() == {}


def test_find_key() -> None:
    doc = parse_document(DOC)
    assert find_key(doc, "admin") == 0
    assert find_key(doc, "ci") == 1
    assert find_key(doc, "nope") is None
    assert find_key(parse_document("port = 1\n"), "admin") is None


def test_append_keeps_everything_and_goes_after_the_last_key() -> None:
    doc = parse_document(DOC)
    assert append_key_table(doc, {"name": "new", "secret": C, "models": [], "rpm": 5}) == []
    text = doc.as_string()
    assert dropped_lines(DOC, text) == 0
    assert names(text) == ["admin", "ci", "new"]
    plain = tomlkit.parse(text).unwrap()
    assert plain["keys"][2] == {"name": "new", "secret": C, "models": [], "rpm": 5}
    assert plain["models"] == {"smollm2:latest": {"ctx_size": 8192}}
    # The comment that introduced the model table still sits right before it.
    assert '# per-model settings\n[models."smollm2:latest"]' in text
    assert "rpm = 5\n\n# per-model settings" in text


def test_append_to_a_document_without_keys() -> None:
    old = "port = 1  # keep\n\n[models.m]\nctx_size = 1\n"
    doc = parse_document(old)
    append_key_table(doc, {"name": "admin", "secret": A, "models": []})
    text = doc.as_string()
    assert dropped_lines(old, text) == 0
    assert names(text) == ["admin"]
    assert tomlkit.parse(text)["models"]["m"]["ctx_size"] == 1


def test_append_to_a_file_without_a_final_newline() -> None:
    old = f'[[keys]]\nname = "a"\nsecret = "{A}"'
    doc = parse_document(old)
    append_key_table(doc, {"name": "b", "secret": B})
    assert names(doc.as_string()) == ["a", "b"]


def test_append_to_an_inline_array() -> None:
    old = f'keys = [{{name = "a", secret = "{A}"}}]  # inline keys\nport = 1\n'
    doc = parse_document(old)
    may_vanish = append_key_table(doc, {"name": "b", "secret": B, "models": []})
    text = doc.as_string()
    assert names(text) == ["a", "b"]
    assert dropped_lines(old, text, may_vanish) == 0
    assert "# inline keys" in text


def test_remove_the_first_key_keeps_the_comment_before_the_next() -> None:
    doc = parse_document(DOC)
    may_vanish = remove_key_table(doc, "admin")
    text = doc.as_string()
    assert names(text) == ["ci"]
    assert dropped_lines(DOC, text, may_vanish) == 0
    assert '# the ci key\n[[keys]]\nname = "ci"' in text
    assert "# inside admin" not in text  # a comment inside the removed table goes with it
    assert A not in text


def test_remove_the_last_key_keeps_the_comment_before_the_next_table() -> None:
    doc = parse_document(DOC)
    may_vanish = remove_key_table(doc, "ci")
    text = doc.as_string()
    assert names(text) == ["admin"]
    assert dropped_lines(DOC, text, may_vanish) == 0
    assert '# per-model settings\n[models."smollm2:latest"]' in text


def test_remove_every_key() -> None:
    doc = parse_document(DOC)
    may_vanish = remove_key_table(doc, "admin") + remove_key_table(doc, "ci")
    text = doc.as_string()
    assert "keys" not in tomlkit.parse(text)
    assert dropped_lines(DOC, text, may_vanish) == 0
    assert "# the ci key" in text and "# per-model settings" in text


def test_remove_from_an_inline_array() -> None:
    old = f'keys = [{{name = "a", secret = "{A}"}}, {{name = "b", secret = "{B}"}}]\nport = 1\n'
    doc = parse_document(old)
    may_vanish = remove_key_table(doc, "a")
    text = doc.as_string()
    assert names(text) == ["b"]
    assert dropped_lines(old, text, may_vanish) == 0


def test_set_key_value_keeps_the_inline_comment() -> None:
    doc = parse_document(DOC)
    may_vanish = set_key_value(doc, "admin", "secret", C)
    text = doc.as_string()
    assert f'secret = "{C}"  # inline' in text
    assert A not in text
    assert dropped_lines(DOC, text) == 1
    assert dropped_lines(DOC, text, may_vanish) == 0


def test_dropped_lines_counts_each_missing_line() -> None:
    assert dropped_lines("a\nb\nb\n", "b\na\n") == 1
    assert dropped_lines("a\n  b  \n\n", "b\na\n") == 0
    assert dropped_lines("a\nb\n", "", ["a"]) == 1
