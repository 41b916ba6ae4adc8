"""Tests for `blazar keys ...` run as a real subprocess (``python -m blazar``) with BLAZAR_CONFIG and
BLAZAR_DATA_DIR in ``tmp_path``: secrets printed once, listings redacted, refusals as one red line and exit 1.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from blazar.config import load_config
from blazar.config.write import backups

SECRET_RE = re.compile(r"^secret: (sk-blazar-[A-Za-z0-9_-]{40,})$", re.MULTILINE)


def blazar(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blazar", "keys", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(env: dict[str, str], *args: str) -> str:
    done = blazar(env, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def secret_of(output: str) -> str:
    match = SECRET_RE.search(output)
    assert match is not None, output
    return match.group(1)


def test_add_ls_rotate_rm(env: dict[str, str]) -> None:
    cfg = Path(env["BLAZAR_CONFIG"])
    out = ok(env, "ls")
    assert "no keys in" in out and "blazar keys add admin" in out
    assert not cfg.exists()

    out = ok(env, "add", "admin")
    admin = secret_of(out)
    assert out.count(admin) == 1
    assert f"added key 'admin' (full access) to {cfg}" in out
    assert cfg.exists() and backups(cfg) == []

    out = ok(
        env, "add", "ci", "--models", "smollm2, qwen2.5:7b", "--rpm", "60", "--tpm", "9000",
        "--daily-tokens", "100000", "--max-concurrent", "2", "--weight", "0.5",
    )  # fmt: skip
    ci = secret_of(out)
    assert "added key 'ci' (models smollm2:latest, qwen2.5:7b)" in out

    keys = {k.name: k for k in load_config(cfg, env).keys}
    assert keys["admin"].secret == admin and keys["admin"].full_access
    assert keys["ci"].secret == ci
    assert keys["ci"].models == ("smollm2:latest", "qwen2.5:7b")
    assert (keys["ci"].rpm, keys["ci"].tpm, keys["ci"].daily_tokens, keys["ci"].max_concurrent) == (
        60,
        9000,
        100000,
        2,
    )
    assert keys["ci"].weight == 0.5

    listing = ok(env, "ls")
    assert admin not in listing and ci not in listing
    lines = listing.splitlines()
    assert lines[0].split() == [
        "NAME",
        "SECRET",
        "MODELS",
        "WEIGHT",
        "MAX_CONC",
        "RPM",
        "TPM",
        "DAILY",
        "SOURCE",
    ]
    assert lines[1].split() == [
        "admin",
        f"sk-bl…{admin[-4:]}",
        "*",
        "(admin)",
        "1",
        "-",
        "-",
        "-",
        "-",
        "config",
    ]
    assert lines[2].split() == [
        "ci", f"sk-bl…{ci[-4:]}", "smollm2:latest,qwen2.5:7b", "0.5", "2", "60", "9000", "100000", "config",
    ]  # fmt: skip

    out = ok(env, "rotate", "ci")
    new_ci = secret_of(out)
    assert new_ci != ci
    text = cfg.read_text()
    assert ci not in text and new_ci in text
    assert len(backups(cfg)) == 2

    out = ok(env, "rm", "ci")
    assert f"removed key 'ci' from {cfg}" in out
    assert new_ci not in cfg.read_text()
    assert [k.name for k in load_config(cfg, env).keys] == ["admin"]


def test_refusals_are_one_red_line(env: dict[str, str]) -> None:
    cfg = Path(env["BLAZAR_CONFIG"])
    admin = secret_of(ok(env, "add", "admin"))
    ok(env, "add", "ci", "--models", "smollm2")
    before = cfg.read_bytes()

    for args, expected in [
        (("rm", "admin"), "error: 'admin' is the last key with full access and other keys remain"),
        (("add", "ci"), "error: a key named 'ci' already exists"),
        (("rm", "ghost"), "error: no key named 'ghost' in"),
        (("rotate", "ghost"), "error: no key named 'ghost' in"),
        (("add", "bad name"), "error: key name 'bad name' must be 1-64 characters"),
        (("add", "w", "--weight", "0"), "error: weight must be a number > 0, got 0.0"),
    ]:
        done = blazar(env, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stderr.startswith(expected), (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1
        assert "Traceback" not in done.stderr
        assert admin not in done.stderr + done.stdout
    assert cfg.read_bytes() == before

    done = blazar(env, "add", "neg", "--rpm", "-1")
    assert done.returncode == 2  # typer's own usage error
    for empty in ("", " , "):  # an unset variable in --models "$MODELS" must not make a full-access key
        done = blazar(env, "add", "wide", "--models", empty)
        assert done.returncode == 2 and "names no model" in done.stderr, done.stderr
    assert cfg.read_bytes() == before
    ok(env, "rm", "ci")
    done = blazar(env, "rm", "admin")
    assert done.returncode == 1 and "--disable-auth" in done.stderr
    ok(env, "rm", "admin", "--disable-auth")
    assert load_config(cfg, env).keys == ()


def test_env_keys_are_listed_but_not_editable(env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = "ops=ops-secret-from-env-0001,bare-secret-from-env-0002"
    listing = ok(env, "ls")
    assert "ops-secret-from-env-0001" not in listing and "bare-secret-from-env-0002" not in listing
    assert [line.split()[0] for line in listing.splitlines()[1:]] == ["ops", "env-2"]
    assert all(line.split()[-1] == "env" for line in listing.splitlines()[1:])
    done = blazar(env, "rotate", "ops")
    assert done.returncode == 1
    assert "comes from the BLAZAR_KEYS environment variable" in done.stderr
    assert "ops-secret-from-env-0001" not in done.stderr
    # With an env admin present, a scoped key may be the first in the file.
    secret_of(ok(env, "add", "scoped", "--models", "smollm2"))
    env["BLAZAR_KEYS"] = "a=short"
    done = blazar(env, "ls")
    assert done.returncode == 1
    assert done.stderr.startswith("error: BLAZAR_KEYS item 1: the secret must be at least 16")
