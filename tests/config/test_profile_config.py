"""Config keys the launch-profile compiler reads: KV cache types, flash attention, SWA, lookup cache, headroom,
and the per-model chat template and mmproj."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.config import Config, load_config_text, render_default_config
from blazar.errors import ConfigError


def load(tmp_path: Path, text: str) -> Config:
    return load_config_text(text, tmp_path / "config.toml", env={"HOME": str(tmp_path)})


def test_defaults(tmp_path: Path) -> None:
    cfg = load(tmp_path, "")
    assert (cfg.cache_type_k, cfg.cache_type_v, cfg.flash_attn) == ("f16", "f16", "auto")
    assert (cfg.swa_full, cfg.lookup_cache, cfg.memory_headroom_mib) == (False, False, 1024)


def test_top_level_and_model_values(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        'cache_type_k = "q8_0"\ncache_type_v = "q4_0"\nflash_attn = "on"\nswa_full = true\n'
        "lookup_cache = true\nmemory_headroom_mib = 0\n"
        '[models.m]\ncache_type_k = "q4_0"\nflash_attn = "off"\nchat_template = "chatml"\n'
        'chat_template_file = "t.jinja"\nmmproj = "sub/mm.gguf"\nlookup_cache = false\n',
    )
    assert (cfg.cache_type_k, cfg.cache_type_v, cfg.flash_attn) == ("q8_0", "q4_0", "on")
    assert (cfg.swa_full, cfg.lookup_cache, cfg.memory_headroom_mib) == (True, True, 0)
    ov = cfg.model_override("m")
    assert (ov.cache_type_k, ov.cache_type_v, ov.flash_attn) == ("q4_0", None, "off")
    assert ov.chat_template == "chatml"
    assert ov.chat_template_file == tmp_path / "t.jinja"
    assert ov.mmproj == tmp_path / "sub" / "mm.gguf"
    assert ov.lookup_cache is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('cache_type_k = "q3"', 'key \'cache_type_k\' must be one of "f16", "bf16"'),
        ('flash_attn = "yes"', 'key \'flash_attn\' must be one of "auto", "on", "off", got "yes"'),
        ("swa_full = 1", "key 'swa_full' must be true or false, got 1 (integer)"),
        ("memory_headroom_mib = -1", "key 'memory_headroom_mib' must be an integer >= 0"),
        ('[models.m]\ncache_type_v = "int8"', "key 'models.m.cache_type_v' must be one of"),
        ('[models.m]\nmmproj = ""', "key 'models.m.mmproj' must be a non-empty string"),
        ('[models.m]\nchat_tmplate = "x"', "(did you mean 'chat_template'?)"),
    ],
)
def test_bad_values_teach(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, text + "\n")
    assert expected in str(exc.value)


def test_rendered_default_documents_the_new_keys(tmp_path: Path) -> None:
    text = render_default_config()
    for key in (
        "cache_type_k",
        "cache_type_v",
        "flash_attn",
        "swa_full",
        "lookup_cache",
        "memory_headroom_mib",
    ):
        assert f"\n{key} = " in text
    assert load(tmp_path, text) == Config(data_dir=tmp_path / ".local/share/blazar")
