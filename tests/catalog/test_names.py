from __future__ import annotations

import pytest

from blazar.catalog import names
from blazar.catalog.names import default_name_for_file, normalize
from blazar.errors import CatalogError


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("smollm2", "smollm2:latest"),
        ("smollm2:q4", "smollm2:q4"),
        ("org/m:1.0", "org/m:1.0"),
    ],
)
def test_normalize(raw: str, want: str) -> None:
    assert normalize(raw) == want


@pytest.mark.parametrize(
    "bad", ["", ":tag", "a:", "a b", "a:b:c/d", "-x", "a/../../b", "x/..", "a//b", "a/./b", "a/", "org/."]
)
def test_normalize_rejects(bad: str) -> None:
    with pytest.raises(CatalogError, match="invalid model name"):
        normalize(bad)


def test_a_long_name_is_refused_for_its_length_without_echoing_it() -> None:
    with pytest.raises(CatalogError) as e:
        normalize("x" * 10_000)
    assert str(e.value) == f"invalid model name '{'x' * 40}...': it is 10000 characters long; use at most 200"
    assert normalize("x" * 200) == "x" * 200 + ":latest"
    with pytest.raises(CatalogError, match="it is 201 characters long"):
        normalize("x" * 201)
    assert normalize(normalize("x" * 200)) == "x" * 200 + ":latest"  # its own output is a name too


def test_a_name_too_long_as_a_file_name_is_refused() -> None:
    """Each '/' is two characters on disk: a name within the limit may still not fit a file name (255 bytes)."""
    with pytest.raises(CatalogError, match="as a file name it is 297 characters long"):
        normalize("a/" * 96 + "a")
    assert normalize("a/" * 50 + "a") == "a/" * 50 + "a:latest"


def test_default_name_for_file() -> None:
    assert default_name_for_file("SmolLM2-135M-Instruct.Q4_1") == "smollm2-135m-instruct:q4_1"
    assert default_name_for_file("model") == "model:latest"


TAIL = "names take no spaces or control characters"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("smollm2\n", r"invalid model name 'smollm2\n': it ends with U+000A (a line feed); " + TAIL),
        (" smollm2", f"invalid model name ' smollm2': it starts with U+0020 (a space); {TAIL}"),
        (
            "smollm2\u00a0",
            r"invalid model name 'smollm2\xa0': it ends with U+00A0 (a no-break space); " + TAIL,
        ),
        ("\tsmollm2", r"invalid model name '\tsmollm2': it starts with U+0009 (a tab); " + TAIL),
        ("smollm2\r\n", r"invalid model name 'smollm2\r\n': it ends with U+000A (a line feed); " + TAIL),
        (
            "smollm2\u2028",
            r"invalid model name 'smollm2\u2028': it ends with U+2028 (a line separator); " + TAIL,
        ),
        (
            "smollm2:q4\r",
            r"invalid model name 'smollm2:q4\r': it ends with U+000D (a carriage return); " + TAIL,
        ),
        (
            "smol\u200blm2",
            r"invalid model name 'smol\u200blm2': it contains U+200B (a zero width space); " + TAIL,
        ),
        ("smol\x00lm2", r"invalid model name 'smol\x00lm2': it contains U+0000 (a null character); " + TAIL),
        (
            "smollm2\ufeff",
            r"invalid model name 'smollm2\ufeff': it ends with U+FEFF (a byte order mark); " + TAIL,
        ),
        (
            "smollm2\x1b",
            r"invalid model name 'smollm2\x1b': it ends with U+001B (an escape character); " + TAIL,
        ),
        (
            "smollm2\u3000",
            r"invalid model name 'smollm2\u3000': it ends with U+3000 (an ideographic space); " + TAIL,
        ),
        ("a b", f"invalid model name 'a b': it contains U+0020 (a space); {TAIL}"),
    ],
)
def test_a_name_with_spaces_or_control_characters_is_refused_naming_the_character(
    raw: str, message: str
) -> None:
    """Names are taken exactly: nothing is trimmed, and the message shows the name escaped on one line."""
    with pytest.raises(CatalogError) as e:
        normalize(raw)
    assert str(e.value) == message
    assert str(e.value).isprintable()  # one line, no raw control or invisible character
    with pytest.raises(CatalogError) as again:
        names.check(raw)  # what a name that is not a catalog name (a remote's ``remote:model``) is held to
    assert str(again.value) == message


def test_a_long_name_with_a_control_character_is_shown_shortened() -> None:
    with pytest.raises(CatalogError) as e:
        normalize("x" * 10_000 + "\n")
    text = str(e.value)
    assert text.startswith(f"invalid model name '{'x' * 40}...': it ends with U+000A (a line feed)")
    assert len(text) < 200


def test_check_keeps_every_other_name_as_it_is() -> None:
    for name in ("smollm2", "far:gpt-4o", "org/m:1.0", "hf.co/org/Repo:Q4_K_M", "remote:model"):
        assert names.check(name) == name
    assert (
        names.check("far:Modèle-中文") == "far:Modèle-中文"
    )  # a remote's names are its own; only invisibles fail
    with pytest.raises(CatalogError, match=r"it ends with U\+000A"):
        names.check("far:gpt-4o\n")
