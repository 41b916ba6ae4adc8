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


@pytest.mark.parametrize("bad", ["", ":tag", "a:", "a b", "a:b:c/d", "-x"])
def test_normalize_rejects(bad: str) -> None:
    with pytest.raises(CatalogError, match="invalid model name"):
        normalize(bad)


def test_default_name_for_file() -> None:
    assert default_name_for_file("SmolLM2-135M-Instruct.Q4_1") == "smollm2-135m-instruct:q4_1"
    assert default_name_for_file("model") == "model:latest"
