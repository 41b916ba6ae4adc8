"""``engine_check_secs``: its default, 0 = off, validation with a teaching error, and the rendered default."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.config import Config, load_config, render_default_config
from blazar.errors import ConfigError


def load(tmp_path: Path, text: str) -> Config:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, {"HOME": str(home)})


def test_default_is_a_day() -> None:
    assert Config().engine_check_secs == 86400


@pytest.mark.parametrize("value", [0, 1, 3600])
def test_accepted(tmp_path: Path, value: int) -> None:
    assert load(tmp_path, f"engine_check_secs = {value}\n").engine_check_secs == value


@pytest.mark.parametrize(
    ("raw", "shown"), [("-1", "-1 (integer)"), ('"daily"', '"daily" (string)'), ("1.5", "1.5 (float)")]
)
def test_rejected_with_teaching_error(tmp_path: Path, raw: str, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"engine_check_secs = {raw}\n")
    assert str(info.value).endswith(f"key 'engine_check_secs' must be an integer >= 0, got {shown}")


def test_rendered_default_documents_it(tmp_path: Path) -> None:
    text = render_default_config()
    assert "\nengine_check_secs = 86400\n" in text
    assert load(tmp_path, text).engine_check_secs == 86400
