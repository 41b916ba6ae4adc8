"""Tests for blazar.config: defaults, the file search order, env overrides and every teaching error.

They own nothing but temporary files; they must not read the real user's config or environment (every call
passes an explicit ``env`` mapping).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from blazar.config import (
    DEFAULT_PORT,
    Config,
    ModelOverride,
    default_config_path,
    default_data_dir,
    load_config,
    normalize_model_name,
    render_default_config,
)
from blazar.errors import BlazarError, ConfigError


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.fixture()
def env(home: Path) -> dict[str, str]:
    return {"HOME": str(home)}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load_text(tmp_path: Path, env: dict[str, str], text: str) -> Config:
    return load_config(write(tmp_path / "cfg" / "config.toml", text), env)


def error_for(tmp_path: Path, env: dict[str, str], text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, env, text)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- defaults and search order -----------------------------------------------------------------------------


def test_defaults_without_any_file(home: Path, env: dict[str, str]) -> None:
    cfg = load_config(env=env)
    assert cfg == Config(data_dir=home / ".local/share/blazar")
    assert cfg.host == "127.0.0.1"
    assert cfg.port == DEFAULT_PORT == 11435
    assert cfg.idle_timeout_secs == 1800
    assert cfg.idle_sleep_secs == 300
    assert cfg.child_start_timeout_secs == 120
    assert cfg.child_header_timeout_secs == 120
    assert cfg.stop_grace_secs == 10.0
    assert cfg.engine_mode == "auto"
    assert "http://localhost:*" in cfg.cors_origins and "app://*" in cfg.cors_origins  # as Ollama's
    assert cfg.log_level == "info"
    assert (cfg.ctx_size, cfg.parallel, cfg.threads, cfg.gpu_layers) == (4096, "auto", 0, -1)
    assert dict(cfg.models) == {}


def test_config_is_frozen_and_hashable(env: dict[str, str]) -> None:
    cfg = load_config(env=env)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.port = 1  # type: ignore[misc]
    assert hash(cfg) == hash(dataclasses.replace(cfg))


def test_default_config_path_order(home: Path, tmp_path: Path) -> None:
    assert default_config_path({"HOME": str(home)}) == home / ".config/blazar/config.toml"
    xdg = tmp_path / "xdg"
    assert default_config_path({"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}) == xdg / "blazar/config.toml"
    # XDG paths must be absolute; a relative one is ignored per the spec.
    assert (
        default_config_path({"HOME": str(home), "XDG_CONFIG_HOME": "rel"})
        == home / ".config/blazar/config.toml"
    )
    explicit = tmp_path / "elsewhere.toml"
    assert (
        default_config_path({"HOME": str(home), "BLAZAR_CONFIG": str(explicit), "XDG_CONFIG_HOME": str(xdg)})
        == explicit
    )
    assert default_config_path({"HOME": str(home), "BLAZAR_CONFIG": "~/b.toml"}) == home / "b.toml"


def test_default_data_dir_order(home: Path, tmp_path: Path) -> None:
    assert default_data_dir({"HOME": str(home)}) == home / ".local/share/blazar"
    assert (
        default_data_dir({"HOME": str(home), "XDG_DATA_HOME": str(tmp_path / "d")}) == tmp_path / "d/blazar"
    )
    assert (
        default_data_dir({"HOME": str(home), "XDG_DATA_HOME": str(tmp_path / "d"), "BLAZAR_DATA_DIR": "~/x"})
        == home / "x"
    )


def test_file_at_xdg_config_home_is_read(home: Path, tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    write(xdg / "blazar/config.toml", "port = 9000\n")
    cfg = load_config(env={"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)})
    assert cfg.port == 9000


def test_file_named_by_blazar_config_is_read(env: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path / "custom.toml", 'host = "0.0.0.0"\n')
    assert load_config(env={**env, "BLAZAR_CONFIG": str(path)}).host == "0.0.0.0"


def test_explicit_missing_file_via_env_is_an_error(env: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_config(env={**env, "BLAZAR_CONFIG": str(missing)})
    assert str(info.value).startswith(f"config file {missing} does not exist (set by BLAZAR_CONFIG)")


def test_explicit_missing_file_via_argument_is_an_error(env: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(missing, env)


def test_config_path_that_is_a_directory(env: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path, env)


def test_not_utf8(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b'host = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        load_config(path, env)


def test_errors_are_blazar_errors() -> None:
    assert issubclass(ConfigError, BlazarError)


# --- a full valid file -------------------------------------------------------------------------------------


def test_every_key_is_read(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_text(
        tmp_path,
        env,
        """
host = "0.0.0.0"
port = 8080
data_dir = "/srv/blazar"
idle_timeout_secs = 0
child_start_timeout_secs = 30
child_header_timeout_secs = 45
stop_grace_secs = 2
engine_mode = "manual"
cors_origins = ["http://localhost:3000", "https://example.org"]
log_level = "debug"
ctx_size = 0
parallel = 4
threads = 8
gpu_layers = 0
""",
    )
    assert cfg == Config(
        host="0.0.0.0",
        port=8080,
        data_dir=Path("/srv/blazar"),
        idle_timeout_secs=0,
        child_start_timeout_secs=30,
        child_header_timeout_secs=45,
        stop_grace_secs=2.0,
        engine_mode="manual",
        cors_origins=("http://localhost:3000", "https://example.org"),
        log_level="debug",
        ctx_size=0,
        parallel=4,
        threads=8,
        gpu_layers=0,
    )
    assert isinstance(cfg.stop_grace_secs, float)


def test_empty_file_gives_defaults(tmp_path: Path, env: dict[str, str], home: Path) -> None:
    assert load_text(tmp_path, env, "# nothing\n") == Config(data_dir=home / ".local/share/blazar")


# --- data_dir ------------------------------------------------------------------------------------------------


def test_relative_data_dir_resolves_against_config_dir(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_text(tmp_path, env, 'data_dir = "state/blazar"\n')
    assert cfg.data_dir == tmp_path / "cfg" / "state" / "blazar"
    assert cfg.data_dir.is_absolute()


def test_tilde_data_dir_expands_to_home(tmp_path: Path, env: dict[str, str], home: Path) -> None:
    assert load_text(tmp_path, env, 'data_dir = "~/models"\n').data_dir == home / "models"


def test_default_data_dir_follows_xdg_data_home(tmp_path: Path, home: Path) -> None:
    cfg = load_config(env={"HOME": str(home), "XDG_DATA_HOME": str(tmp_path / "data")})
    assert cfg.data_dir == tmp_path / "data" / "blazar"


# --- env overrides -------------------------------------------------------------------------------------------


def test_env_overrides_win_over_the_file(tmp_path: Path, env: dict[str, str], home: Path) -> None:
    path = write(tmp_path / "config.toml", 'host = "10.0.0.1"\nport = 9000\ndata_dir = "/srv/a"\n')
    cfg = load_config(
        path, {**env, "BLAZAR_HOST": "0.0.0.0", "BLAZAR_PORT": "12345", "BLAZAR_DATA_DIR": "~/blz"}
    )
    assert (cfg.host, cfg.port, cfg.data_dir) == ("0.0.0.0", 12345, home / "blz")


def test_env_overrides_without_a_file(env: dict[str, str], tmp_path: Path) -> None:
    cfg = load_config(env={**env, "BLAZAR_PORT": " 8081 ", "BLAZAR_DATA_DIR": str(tmp_path / "d")})
    assert cfg.port == 8081
    assert cfg.data_dir == tmp_path / "d"


def test_empty_env_values_count_as_unset(env: dict[str, str]) -> None:
    cfg = load_config(env={**env, "BLAZAR_PORT": "", "BLAZAR_HOST": "", "BLAZAR_CONFIG": ""})
    assert (cfg.host, cfg.port) == ("127.0.0.1", 11435)


@pytest.mark.parametrize("bad", ["abc", "0", "65536", "-1", "80.5", "1e3"])
def test_bad_blazar_port(env: dict[str, str], bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={**env, "BLAZAR_PORT": bad})
    assert str(info.value) == f"BLAZAR_PORT must be an integer port 1-65535, got {bad!r}"


def test_blank_blazar_host(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="BLAZAR_HOST"):
        load_config(env={**env, "BLAZAR_HOST": "   "})


# --- type and range errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('port = "80a"', """key 'port' must be an integer between 1 and 65535, got "80a" (string)"""),
        ("port = 0", "key 'port' must be an integer between 1 and 65535, got 0 (integer)"),
        ("port = 65536", "key 'port' must be an integer between 1 and 65535, got 65536 (integer)"),
        ("port = 80.0", "key 'port' must be an integer between 1 and 65535, got 80.0 (float)"),
        ("host = 1", "key 'host' must be a non-empty string, got 1 (integer)"),
        ('host = ""', """key 'host' must be a non-empty string, got "" (string)"""),
        ("data_dir = 5", "key 'data_dir' must be a non-empty string, got 5 (integer)"),
        ("idle_timeout_secs = -1", "key 'idle_timeout_secs' must be an integer >= 0, got -1 (integer)"),
        (
            "idle_sleep_secs = 4294967296",
            "key 'idle_sleep_secs' must be an integer between 0 and 2147483647, got 4294967296 (integer)",
        ),
        (
            'idle_timeout_secs = "1h"',
            """key 'idle_timeout_secs' must be an integer >= 0, got "1h" (string)""",
        ),
        (
            "child_start_timeout_secs = 0",
            "key 'child_start_timeout_secs' must be an integer >= 1, got 0 (integer)",
        ),
        (
            "child_header_timeout_secs = 0",
            "key 'child_header_timeout_secs' must be an integer >= 1, got 0 (integer)",
        ),
        ("stop_grace_secs = -0.5", "key 'stop_grace_secs' must be a number >= 0, got -0.5 (float)"),
        ("stop_grace_secs = nan", "key 'stop_grace_secs' must be a number >= 0, got nan (float)"),
        ("stop_grace_secs = inf", "key 'stop_grace_secs' must be a number >= 0, got inf (float)"),
        ('stop_grace_secs = "10s"', """key 'stop_grace_secs' must be a number >= 0, got "10s" (string)"""),
        (
            'engine_mode = "fast"',
            """key 'engine_mode' must be one of "auto", "manual", got "fast" (string)""",
        ),
        (
            'log_level = "INFO"',
            """key 'log_level' must be one of "debug", "info", "warning", "error", got "INFO" (string)""",
        ),
        ('cors_origins = "*"', """key 'cors_origins' must be an array of strings, got "*" (string)"""),
        ('cors_origins = ["a", 2]', "key 'cors_origins[1]' must be a string, got 2 (integer)"),
        ("ctx_size = -1", "key 'ctx_size' must be an integer between 0 and 2147483647, got -1 (integer)"),
        (
            "parallel = 0",
            "key 'parallel' must be \"auto\" or an integer between 1 and 2147483647, got 0 (integer)",
        ),
        (
            'parallel = "many"',
            'key \'parallel\' must be "auto" or an integer between 1 and 2147483647, got "many" (string)',
        ),
        (
            "threads = 9223372036854775807",
            "key 'threads' must be an integer between 0 and 2147483647, got 9223372036854775807 (integer)",
        ),
        (
            "idle_timeout_secs = 99999999999999999999999",
            "key 'idle_timeout_secs' must be an integer >= 0 and at most 9223372036854775807 (TOML's 64-bit"
            " integers), got 99999999999999999999999 (integer)",
        ),
        ("threads = -2", "key 'threads' must be an integer between 0 and 2147483647, got -2 (integer)"),
        (
            "gpu_layers = -2",
            "key 'gpu_layers' must be an integer between -1 and 2147483647, got -2 (integer)",
        ),
        ("port = 1979-05-27", "key 'port' must be an integer between 1 and 65535, got 1979-05-27 (date)"),
        ("port = [1]", "key 'port' must be an integer between 1 and 65535, got [1] (array)"),
        ("models = 3", """key 'models' must be a table of [models."name:tag"] tables, got 3 (integer)"""),
    ],
)
def test_type_and_range_errors(tmp_path: Path, env: dict[str, str], text: str, expected: str) -> None:
    message = error_for(tmp_path, env, text + "\n")
    assert message == f"{tmp_path / 'cfg' / 'config.toml'}: {expected}"


@pytest.mark.parametrize(
    "key",
    [
        "port",
        "idle_timeout_secs",
        "child_start_timeout_secs",
        "ctx_size",
        "parallel",
        "threads",
        "gpu_layers",
    ],
)
def test_booleans_are_not_integers(tmp_path: Path, env: dict[str, str], key: str) -> None:
    message = error_for(tmp_path, env, f"{key} = true\n")
    assert message.endswith("got true (boolean)")
    expected = '"auto" or an integer' if key == "parallel" else "an integer"
    assert f"key '{key}' must be {expected}" in message


def test_boolean_is_not_a_number(tmp_path: Path, env: dict[str, str]) -> None:
    assert error_for(tmp_path, env, "stop_grace_secs = false\n").endswith(
        "key 'stop_grace_secs' must be a number >= 0, got false (boolean)"
    )


def test_boolean_rejected_in_model_override(tmp_path: Path, env: dict[str, str]) -> None:
    message = error_for(tmp_path, env, '[models."m"]\nparallel = true\n')
    assert message.endswith(
        "key 'models.m.parallel' must be \"auto\" or an integer between 1 and 2147483647, got true (boolean)"
    )


def test_long_values_are_shortened(tmp_path: Path, env: dict[str, str]) -> None:
    message = error_for(tmp_path, env, f'port = "{"9" * 200}"\n')
    assert message.endswith("... (string)")
    assert len(message) < 200 + len(str(tmp_path))


# --- unknown keys and syntax -----------------------------------------------------------------------------------


def test_unknown_key_suggests_the_close_one(tmp_path: Path, env: dict[str, str]) -> None:
    assert error_for(tmp_path, env, "prot = 1\n").endswith(
        "config.toml: unknown key 'prot' (did you mean 'port'?)"
    )


def test_unknown_table_suggests_models(tmp_path: Path, env: dict[str, str]) -> None:
    assert error_for(tmp_path, env, '[model."x"]\nctx_size = 1\n').endswith(
        "unknown key 'model' (did you mean 'models'?)"
    )


def test_unknown_key_without_a_close_match_lists_allowed(tmp_path: Path, env: dict[str, str]) -> None:
    message = error_for(tmp_path, env, "zzzzzz = 1\n")
    assert "unknown key 'zzzzzz'; allowed keys here are: host, port, data_dir" in message


def test_unknown_key_in_model_table(tmp_path: Path, env: dict[str, str]) -> None:
    message = error_for(tmp_path, env, '[models."qwen:7b"]\nctx_sise = 1\n')
    assert message.endswith("""unknown key 'models."qwen:7b".ctx_sise' (did you mean 'ctx_size'?)""")


@pytest.mark.parametrize(
    ("text", "line"),
    [("port = 80a\n", 1), ('host = "a"\nport = 1\nport = 2\n', 3), ('host = "unterminated\n', 1)],
)
def test_syntax_error_names_file_and_line(tmp_path: Path, env: dict[str, str], text: str, line: int) -> None:
    message = error_for(tmp_path, env, text)
    assert message.startswith(f"{tmp_path / 'cfg' / 'config.toml'} is not valid TOML: ")
    assert f"line {line}" in message


# --- per-model overrides ---------------------------------------------------------------------------------------


def test_model_overrides_are_read_and_normalised(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_text(
        tmp_path,
        env,
        """
[models.smollm2]
ctx_size = 8192

[models."qwen2.5:7b"]
parallel = 2
threads = 4
gpu_layers = -1
idle_timeout_secs = 0
extra_args = ["--flash-attn", "on"]
engine = "llama-cpp"

[models."registry.local:5000/org/m"]
""",
    )
    assert set(cfg.models) == {"smollm2:latest", "qwen2.5:7b", "registry.local:5000/org/m:latest"}
    assert cfg.models["smollm2:latest"] == ModelOverride(ctx_size=8192)
    assert cfg.models["qwen2.5:7b"] == ModelOverride(
        parallel=2,
        threads=4,
        gpu_layers=-1,
        idle_timeout_secs=0,
        extra_args=("--flash-attn", "on"),
        engine="llama-cpp",
    )
    assert cfg.models["registry.local:5000/org/m:latest"] == ModelOverride()
    assert cfg.model_override("smollm2") == ModelOverride(ctx_size=8192)
    assert cfg.model_override("unknown") == ModelOverride()
    with pytest.raises(TypeError):
        cfg.models["x:y"] = ModelOverride()  # type: ignore[index]


def test_duplicate_models_after_normalisation(tmp_path: Path, env: dict[str, str]) -> None:
    message = error_for(tmp_path, env, '[models.m]\nctx_size = 1\n[models."m:latest"]\nctx_size = 2\n')
    assert "both mean 'm:latest'" in message


@pytest.mark.parametrize("name", ["m:", ":tag", " "])
def test_invalid_model_names(tmp_path: Path, env: dict[str, str], name: str) -> None:
    message = error_for(tmp_path, env, f'[models."{name}"]\nctx_size = 1\n')
    assert "is not a valid model name" in message


def test_model_entry_must_be_a_table(tmp_path: Path, env: dict[str, str]) -> None:
    message = error_for(tmp_path, env, "[models]\nm = 3\n")
    assert message.endswith("key 'models.m' must be a table of per-model settings, got 3 (integer)")


def test_model_override_type_errors(tmp_path: Path, env: dict[str, str]) -> None:
    assert error_for(tmp_path, env, '[models.m]\nextra_args = "--x"\n').endswith(
        """key 'models.m.extra_args' must be an array of strings, got "--x" (string)"""
    )
    assert error_for(tmp_path, env, "[models.m]\nengine = 3\n").endswith(
        "key 'models.m.engine' must be a non-empty string, got 3 (integer)"
    )


def test_normalize_model_name() -> None:
    assert normalize_model_name("smollm2") == "smollm2:latest"
    assert normalize_model_name("smollm2:1.7b") == "smollm2:1.7b"
    assert normalize_model_name("org/m") == "org/m:latest"
    assert normalize_model_name("host:5000/org/m") == "host:5000/org/m:latest"
    for bad in ("", "m:", ":t", "org/", " smollm2:1.7b ", "smollm2\n"):  # names are taken exactly
        with pytest.raises(ValueError):
            normalize_model_name(bad)


# --- the rendered default document -------------------------------------------------------------------------


def test_rendered_default_config_round_trips(tmp_path: Path, env: dict[str, str], home: Path) -> None:
    text = render_default_config()
    for key in (
        "host", "port", "idle_timeout_secs", "idle_sleep_secs", "child_start_timeout_secs", "child_header_timeout_secs",
        "stop_grace_secs", "engine_mode", "cors_origins", "log_level", "ctx_size", "parallel", "threads",
        "gpu_layers",
    ):  # fmt: skip
        assert f"\n{key} = " in text
    assert "# data_dir = " in text
    assert '# [models."smollm2:latest"]' in text
    assert text.count("\n#") > 13
    path = write(tmp_path / "config.toml", text)
    assert load_config(path, env) == Config(data_dir=home / ".local/share/blazar")


def test_parallel_is_auto_or_a_number_of_slots(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_text(
        tmp_path, env, 'parallel = 2\n[models."a"]\nparallel = "auto"\n[models."b"]\nparallel = 8\n'
    )
    assert cfg.parallel == 2
    assert cfg.model_override("a").parallel == "auto" and cfg.model_override("b").parallel == 8
    assert load_text(tmp_path, env, 'parallel = "auto"\n').parallel == "auto"
    message = error_for(tmp_path, env, 'parallel = "AUTO"\n')  # exact, as every choice is
    assert 'must be "auto" or an integer between 1 and 2147483647, got "AUTO" (string)' in message


def test_the_config_reference_page_is_generated_from_the_defaults() -> None:
    """docs/config.md is ``render_reference``'s output: a default or a key changed without regenerating it
    (``python scripts/config_reference.py``) fails here; every key of every table is on it."""
    from blazar.config.default_doc import render_reference
    from blazar.config.model import Config, KeyConfig, ModelOverride, PoolConfig, RemoteConfig

    page = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    assert page == render_reference(), "docs/config.md is stale: run python scripts/config_reference.py"
    documented = {line.split("`")[1] for line in page.splitlines() if line.startswith("| `")}
    skipped = {
        "models",
        "keys",
        "remotes",
        "pools",
        "from_env",
    }  # tables of their own, and how a key was given
    for cls in (Config, ModelOverride, KeyConfig, RemoteConfig, PoolConfig):
        missing = {f.name for f in dataclasses.fields(cls)} - documented - skipped
        assert not missing, f"{cls.__name__} keys missing from docs/config.md: {sorted(missing)}"


def test_a_metrics_token_is_a_secret_refused_without_being_shown(tmp_path: Path, env: dict[str, str]) -> None:
    token = "scrape-token-0123456789"
    cfg = load_text(tmp_path, env, f'metrics_token = "{token}"\n')
    assert cfg.metrics_token == token and token not in repr(cfg)
    short = error_for(tmp_path, env, 'metrics_token = "tiny-secret"\n')
    assert "metrics_token" in short and "11 characters" in short and "tiny-secret" not in short
    assert load_text(tmp_path, env, 'metrics_token = ""\n').metrics_token == ""
