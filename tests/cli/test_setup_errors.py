"""What the commands say when the machine's setup is wrong: one line naming the fix, exit 1, no traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import blazar_cmd, free_port


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAZAR_")}
    return {**env, "BLAZAR_CONFIG": str(config), "BLAZAR_DATA_DIR": str(tmp_path / "data"), **extra}


def one_line_error(args: tuple[str, ...], env: dict[str, str]) -> str:
    r = blazar_cmd(*args, env=env, check=False)
    assert r.returncode == 1, (args, r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr.strip()


@pytest.mark.parametrize("args", [("ls",), ("show", "smollm2"), ("serve",)])
def test_a_data_directory_that_is_a_file(tmp_path: Path, args: tuple[str, ...]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    env = env_for(tmp_path, BLAZAR_DATA_DIR=str(afile), BLAZAR_PORT=str(free_port()))
    assert one_line_error(args, env) == (
        f"error: data directory {afile} cannot be used: {afile} is a file, not a directory; set data_dir in"
        " config.toml or BLAZAR_DATA_DIR to a directory this user can write"
    )
    env["BLAZAR_DATA_DIR"] = str(afile / "below")
    assert f"a part of {afile / 'below'} is a file, not a directory" in one_line_error(args, env)


@pytest.mark.parametrize(
    ("host", "why"), [("999.1.1.1", "Name or service not known"), ("10.255.255.254", "")]
)
def test_serve_on_a_host_that_is_not_this_machine(tmp_path: Path, host: str, why: str) -> None:
    port = free_port()
    line = one_line_error(("serve",), env_for(tmp_path, BLAZAR_HOST=host, BLAZAR_PORT=str(port)))
    assert line.startswith(f"error: cannot listen on {host}:{port}: {why}"), line
    assert "BLAZAR_HOST" in line


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (
            ("--path", "/nonexistent/llama-server"),
            "error: engine binary /nonexistent/llama-server does not exist",
        ),
        (("--path", "/bin/true", "--tag", ""), "error: engine tag '' is not valid"),
        (("--path", "/bin/true", "--tag", "../x"), "error: engine tag '../x' is not valid"),
    ],
)
def test_engine_add_refuses_before_it_probes(tmp_path: Path, extra: tuple[str, ...], needle: str) -> None:
    line = one_line_error(("engine", "add", "--kind", "llama-cpp", *extra), env_for(tmp_path))
    assert line.startswith(needle) and "warning" not in line, line
