"""`blazar config init | path` run as a real subprocess with BLAZAR_CONFIG in ``tmp_path``: the written document
loads to the built-in defaults, an existing file is never replaced without ``--force``, and ``--force`` keeps the
old one as a ``.bak``."""

from __future__ import annotations

from pathlib import Path

from blazar.config import load_config, load_config_text
from blazar.config.write import backups
from tests.conftest import blazar_cmd


def test_init_writes_the_defaults_and_never_replaces_a_file_unasked(env: dict[str, str]) -> None:
    path = Path(env["BLAZAR_CONFIG"])
    absent = (
        "(absent: set by BLAZAR_CONFIG, so the other commands refuse to start; blazar config init writes it)"
    )
    assert blazar_cmd("config", "path", env=env).stdout.strip() == f"{path} {absent}"
    refused = blazar_cmd("ls", env=env, check=False)
    assert refused.returncode == 1 and "does not exist" in refused.stderr, refused.stderr
    no_env = {k: v for k, v in env.items() if k != "BLAZAR_CONFIG"}
    assert (
        blazar_cmd("config", "path", env=no_env)
        .stdout.strip()
        .endswith("(absent: the built-in defaults apply)")
    )

    out = blazar_cmd("config", "init", env=env).stdout
    assert out.strip() == f"wrote the default config to {path}"
    assert path.stat().st_mode & 0o777 == 0o600
    written = load_config(path, env=env)
    defaults = load_config_text(None, path, env=env)
    assert written == defaults
    assert "# Blazar configuration. Every value shown is the built-in default." in path.read_text()
    assert blazar_cmd("config", "path", env=env).stdout.strip() == str(path)

    path.write_text("port = 12000\n")
    again = blazar_cmd("config", "init", env=env, check=False)
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert again.stderr.strip() == (
        f"error: {path} already exists; pass --force to replace it (the old file is kept as a .bak)"
    )
    assert path.read_text() == "port = 12000\n"

    forced = blazar_cmd("config", "init", "--force", env=env).stdout
    [bak] = backups(path)
    assert forced.strip() == f"wrote the default config to {path}; the old file is kept as {bak}"
    assert bak.read_text() == "port = 12000\n" and load_config(path, env=env).port == defaults.port


def test_a_path_with_brackets_is_printed_as_it_is(tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "[projects]" / "config.toml"
    path.parent.mkdir()
    env = {**env, "BLAZAR_CONFIG": str(path)}
    assert (
        blazar_cmd("config", "path", env=env)
        .stdout.strip()
        .startswith(f"{path} (absent: set by BLAZAR_CONFIG")
    )
    assert blazar_cmd("config", "init", env=env).stdout.strip() == f"wrote the default config to {path}"
    assert blazar_cmd("config", "path", env=env).stdout.strip() == str(path)
