"""Model names in config.toml are taken exactly, as on every route: a key's scope or a ``[models."NAME"]`` section
whose name has a space or a control character is refused naming it, never trimmed into another model's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.config import load_config_text, normalize_model_name
from blazar.errors import ConfigError

SECRET = "sk-exact-0123456789abcdef"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (f'[[keys]]\nname = "k"\nsecret = "{SECRET}"\nmodels = [" smollm2"]\n', "keys[0].models[0]"),
        (f'[[keys]]\nname = "k"\nsecret = "{SECRET}"\nmodels = ["smollm2\\n"]\n', "keys[0].models[0]"),
        ('[models."smollm2 "]\nparallel = 2\n', 'models."smollm2 "'),
        ('semantic_cache_model = "smollm2\\u00a0"\n', "semantic_cache_model"),
    ],
)
def test_a_name_with_a_space_or_control_character_is_refused(tmp_path: Path, text: str, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text(text, tmp_path / "config.toml", {})
    message = str(info.value)
    assert "names take no spaces or control characters" in message, message
    assert "\n" not in message and "\u00a0" not in message  # the character is named, escaped, on one line


def test_valid_names_are_unchanged(tmp_path: Path) -> None:
    assert normalize_model_name("smollm2") == "smollm2:latest"
    assert normalize_model_name("host:5000/m") == "host:5000/m:latest"
    cfg = load_config_text(
        f'[[keys]]\nname = "k"\nsecret = "{SECRET}"\nmodels = ["smollm2", "org/m:q4"]\n',
        tmp_path / "c.toml",
        {},
    )
    assert cfg.keys[0].models == ("smollm2:latest", "org/m:q4")
