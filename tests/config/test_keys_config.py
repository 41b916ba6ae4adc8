"""Tests for ``[[keys]]`` and ``BLAZAR_KEYS`` in blazar.config: parsing, defaults, every teaching error, redaction.

They own only temporary files and pass an explicit ``env`` to every load; no message may contain a secret.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.config import (
    Config,
    KeyConfig,
    KeyLimits,
    load_config,
    load_config_text,
    redact_secret,
    render_default_config,
)
from blazar.errors import ConfigError

SECRET = "s3cret-value-0123456789"
OTHER = "another-secret-abcdefgh"


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home)}


def cfg_path(tmp_path: Path) -> Path:
    return tmp_path / "cfg" / "config.toml"


def load_text(tmp_path: Path, env: dict[str, str], text: str) -> Config:
    path = cfg_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return load_config(path, env)


def error_for(tmp_path: Path, env: dict[str, str], text: str, *hidden: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, env, text)
    message = str(info.value)
    assert "\n" not in message
    for secret in (SECRET, OTHER, *hidden):
        assert secret not in message
    return message


def key_toml(name: str = "admin", secret: str = SECRET, extra: str = "") -> str:
    return f'[[keys]]\nname = "{name}"\nsecret = "{secret}"\n{extra}\n'


# --- parsing ---------------------------------------------------------------------------------------------


def test_no_keys_by_default(tmp_path: Path, env: dict[str, str]) -> None:
    assert load_config(env=env).keys == ()
    assert load_text(tmp_path, env, "port = 1234\n").keys == ()


def test_a_full_key_table(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_text(
        tmp_path,
        env,
        key_toml(
            "team-a.ci_1",
            extra='models = ["smollm2", "qwen2.5:7b", "smollm2:latest"]\nweight = 3\n'
            "max_concurrent = 4\nrpm = 60\ntpm = 100000\ndaily_tokens = 5000000",
        ),
    )
    (key,) = cfg.keys
    assert key == KeyConfig(
        name="team-a.ci_1",
        secret=SECRET,
        models=("smollm2:latest", "qwen2.5:7b"),
        weight=3.0,
        max_concurrent=4,
        rpm=60,
        tpm=100000,
        daily_tokens=5000000,
    )
    assert isinstance(key.weight, float)
    assert key.limits == KeyLimits(4, 60, 100000, 5000000)
    assert not key.full_access
    assert not key.from_env


def test_key_defaults(tmp_path: Path, env: dict[str, str]) -> None:
    (key,) = load_text(tmp_path, env, key_toml()).keys
    assert key.models == ()
    assert key.full_access
    assert key.weight == 1.0
    assert key.limits == KeyLimits(0, 0, 0, 0)


def test_inline_array_of_keys(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_text(tmp_path, env, f'keys = [{{name = "a", secret = "{SECRET}"}}]\n')
    assert [k.name for k in cfg.keys] == ["a"]


def test_env_keys_are_added_after_the_file(tmp_path: Path, env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = f" ops = {OTHER} , bare-secret-0123456789 "
    cfg = load_text(tmp_path, env, key_toml())
    assert [(k.name, k.from_env, k.full_access) for k in cfg.keys] == [
        ("admin", False, True),
        ("ops", True, True),
        ("env-2", True, True),
    ]
    assert cfg.keys[1].secret == OTHER
    assert cfg.keys[2].secret == "bare-secret-0123456789"
    assert cfg.keys[2].weight == 1.0


def test_env_keys_without_a_file(env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = SECRET
    assert [k.name for k in load_config(env=env).keys] == ["env-1"]


def test_empty_env_value_is_unset(env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = ""
    assert load_config(env=env).keys == ()


def test_load_config_text_validates_without_a_file(tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "absent" / "config.toml"
    assert load_config_text(None, path, env).keys == ()
    assert [k.name for k in load_config_text(key_toml(), path, env).keys] == ["admin"]
    with pytest.raises(ConfigError, match=r"absent/config.toml: keys\[0\] has no 'name'"):
        load_config_text(f'[[keys]]\nsecret = "{SECRET}"\n', path, env)


# --- errors in the file ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f'[keys]\nname = "a"\nsecret = "{SECRET}"\n',
            "key 'keys' must be an array of [[keys]] tables, got a table "
            "(write each key as a [[keys]] table with name and secret)",
        ),
        (
            f'keys = "{SECRET}"\n',
            "key 'keys' must be an array of [[keys]] tables, got a string "
            "(write each key as a [[keys]] table with name and secret)",
        ),
        (
            f'keys = ["{SECRET}"]\n',
            "key 'keys[0]' must be a table with name and secret (write it as [[keys]]), got a string",
        ),
        (
            f'[[keys]]\nsecret = "{SECRET}"\n',
            "keys[0] has no 'name'; every [[keys]] entry needs a unique name and a secret "
            "(blazar keys add NAME writes both)",
        ),
        (
            key_toml("bad name"),
            """key 'keys[0].name' must be a non-empty string of at most 64 letters, digits, '.', '_' and '-', """
            """got "bad name" (string)""",
        ),
        (
            key_toml(""),
            """key 'keys[0].name' must be a non-empty string of at most 64 letters, digits, '.', '_' and '-', """
            """got "" (string)""",
        ),
        (
            f'[[keys]]\nname = 7\nsecret = "{SECRET}"\n',
            "key 'keys[0].name' must be a non-empty string of at most 64 letters, digits, '.', '_' and '-', got 7 (integer)",
        ),
        (
            '[[keys]]\nname = "ci"\n',
            "keys[0] ('ci') has no 'secret'; add one of at least 16 printable ASCII characters without spaces, "
            "or remove the entry and run: blazar keys add ci",
        ),
        (
            key_toml("ci", "tooShort123"),
            "key 'keys[0].secret' ('ci') must be at least 16 printable ASCII characters without spaces, "
            "got 11 characters",
        ),
        (
            key_toml("ci", "has spaces in it 0123"),
            "key 'keys[0].secret' ('ci') must be at least 16 printable ASCII characters without spaces, "
            "got 21 characters including spaces or other characters",
        ),
        (
            '[[keys]]\nname = "ci"\nsecret = 12345678901234567890\n',
            "key 'keys[0].secret' ('ci') must be a string of at least 16 printable ASCII characters without "
            "spaces, got an integer",
        ),
        (
            key_toml(extra='models = "smollm2"'),
            """key 'keys[0].models' must be an array of strings, got "smollm2" (string)""",
        ),
        (key_toml(extra='models = ["a", 2]'), "key 'keys[0].models[1]' must be a string, got 2 (integer)"),
        (
            key_toml(extra='models = ["m:"]'),
            "key 'keys[0].models[0]' is not a valid model name: model name 'm:' ends with ':' but has no tag",
        ),
        (
            key_toml(extra='models = ["../x"]'),
            "key 'keys[0].models[0]' is not a valid model name: invalid model name '../x:latest': use name[:tag]"
            " with letters, digits, '.', '_', '-' (and '/' between parts of the name, none of them"
            " empty, '.' or '..')",
        ),
        (key_toml(extra="weight = 0"), "key 'keys[0].weight' must be a number > 0, got 0 (integer)"),
        (key_toml(extra="weight = -1.5"), "key 'keys[0].weight' must be a number > 0, got -1.5 (float)"),
        (key_toml(extra="weight = nan"), "key 'keys[0].weight' must be a number > 0, got nan (float)"),
        (key_toml(extra="weight = inf"), "key 'keys[0].weight' must be a number > 0, got inf (float)"),
        (key_toml(extra="weight = true"), "key 'keys[0].weight' must be a number > 0, got true (boolean)"),
        (key_toml(extra='weight = "2"'), """key 'keys[0].weight' must be a number > 0, got "2" (string)"""),
        (
            key_toml(extra="max_concurrent = -1"),
            "key 'keys[0].max_concurrent' must be an integer >= 0, got -1 (integer)",
        ),
        (key_toml(extra='rpm = "60"'), """key 'keys[0].rpm' must be an integer >= 0, got "60" (string)"""),
        (key_toml(extra="tpm = true"), "key 'keys[0].tpm' must be an integer >= 0, got true (boolean)"),
        (
            key_toml(extra="daily_tokens = 1.5"),
            "key 'keys[0].daily_tokens' must be an integer >= 0, got 1.5 (float)",
        ),
        (key_toml(extra="rmp = 3"), "unknown key 'keys[0].rmp' (did you mean 'rpm'?)"),
        (
            key_toml(extra="zzzz = 3"),
            "unknown key 'keys[0].zzzz'; allowed keys here are: name, secret, models, weight, max_concurrent, "
            "rpm, tpm, daily_tokens",
        ),
        (
            key_toml("a") + key_toml("a", OTHER),
            "keys[1] reuses the key name 'a' of keys[0]; key names must be unique",
        ),
        (
            key_toml("a") + key_toml("b"),
            "keys[1] reuses the secret of keys[0]; give every key its own secret",
        ),
        ('key = "x"\n', "unknown key 'key' (did you mean 'keys'?)"),
    ],
)
def test_key_errors(tmp_path: Path, env: dict[str, str], text: str, expected: str) -> None:
    assert error_for(tmp_path, env, text) == f"{cfg_path(tmp_path)}: {expected}"


def test_the_second_table_is_named_by_index(tmp_path: Path, env: dict[str, str]) -> None:
    message = error_for(tmp_path, env, key_toml("a") + key_toml("b", OTHER, "rpm = -3"))
    assert message.endswith("key 'keys[1].rpm' must be an integer >= 0, got -3 (integer)")


# --- errors in BLAZAR_KEYS ---------------------------------------------------------------------------------


FORM = "BLAZAR_KEYS must be comma-separated name=secret items (or bare secrets)"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f"a={SECRET},", f"{FORM}; item 2 is empty (drop the extra comma)"),
        (f",{SECRET}", f"{FORM}; item 1 is empty (drop the extra comma)"),
        (f"a={SECRET},,b={OTHER}", f"{FORM}; item 2 is empty (drop the extra comma)"),
        (
            f"bad name={SECRET}",
            f"{FORM}; item 1 has a name that is empty, longer than 64 characters or holds characters other than "
            "letters, digits, '.', '_' and '-'",
        ),
        (
            f"={SECRET}",
            f"{FORM}; item 1 has a name that is empty, longer than 64 characters or holds characters other than "
            "letters, digits, '.', '_' and '-'",
        ),
        (
            "a=short",
            "BLAZAR_KEYS item 1: the secret must be at least 16 printable ASCII characters without spaces, "
            "got 5 characters",
        ),
        (
            f"a={SECRET},b=",
            "BLAZAR_KEYS item 2: the secret must be at least 16 printable ASCII characters without spaces, "
            "got 0 characters",
        ),
        (
            "tooshortbare",
            "BLAZAR_KEYS item 1: the secret must be at least 16 printable ASCII characters without spaces, "
            "got 12 characters",
        ),
        (
            f"a={SECRET},a={OTHER}",
            "BLAZAR_KEYS key 'a' reuses the key name 'a' of BLAZAR_KEYS key 'a'; key names must be unique",
        ),
        (
            f"a={SECRET},b={SECRET}",
            "BLAZAR_KEYS key 'b' reuses the secret of BLAZAR_KEYS key 'a'; give every key its own secret",
        ),
    ],
)
def test_env_key_errors(tmp_path: Path, env: dict[str, str], value: str, expected: str) -> None:
    env["BLAZAR_KEYS"] = value
    assert error_for(tmp_path, env, "") == expected


def test_env_name_clash_with_the_file(tmp_path: Path, env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = f"admin={OTHER}"
    assert error_for(tmp_path, env, key_toml()) == (
        f"{cfg_path(tmp_path)}: BLAZAR_KEYS key 'admin' reuses the key name 'admin' of keys[0]; "
        "key names must be unique"
    )


def test_env_secret_clash_with_the_file(tmp_path: Path, env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = f"ops={SECRET}"
    assert error_for(tmp_path, env, key_toml()) == (
        f"{cfg_path(tmp_path)}: BLAZAR_KEYS key 'ops' reuses the secret of keys[0]; give every key its own secret"
    )


def test_bare_env_secret_name_clash(tmp_path: Path, env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = OTHER
    message = error_for(tmp_path, env, key_toml("env-1"))
    assert message.endswith(
        "BLAZAR_KEYS key 'env-1' reuses the key name 'env-1' of keys[0]; key names must be unique"
    )


def test_an_equals_sign_splits_name_and_secret_without_showing_either(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # A bare secret that holds '=' is read as name=secret; neither half may appear in the message.
    env["BLAZAR_KEYS"] = "abc/def+ghijklmnop=="
    message = error_for(tmp_path, env, "", "abc/def+ghijklmnop")
    assert "abc" not in message


# --- redaction ---------------------------------------------------------------------------------------------


def test_reprs_never_show_the_secret(tmp_path: Path, env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = f"ops={OTHER}"
    cfg = load_text(tmp_path, env, key_toml())
    for text in (repr(cfg), str(cfg), repr(cfg.keys), str(cfg.keys[0]), repr(cfg.keys[1]), f"{cfg.keys[0]}"):
        assert SECRET not in text
        assert OTHER not in text
    assert "secret='…6789'" in repr(cfg.keys[0])


def test_redact_secret() -> None:
    assert redact_secret("sk-blazar-abcdefghijklmnopWXYZ") == "sk-bl…WXYZ"
    assert redact_secret("my-own-secret-0123456789") == "…6789"


def test_rendered_default_documents_keys(tmp_path: Path, env: dict[str, str]) -> None:
    text = render_default_config()
    assert "# [[keys]]" in text
    assert "BLAZAR_KEYS" in text
    assert load_text(tmp_path, env, text).keys == ()
