from __future__ import annotations

import pytest

from blazar.errors import CatalogError
from blazar.names import default_name_for_file, normalize


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("smollm2", "smollm2:latest"),
        ("smollm2:q4", "smollm2:q4"),
        ("org/m:1.0", "org/m:1.0"),
        (" a ", "a:latest"),
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
