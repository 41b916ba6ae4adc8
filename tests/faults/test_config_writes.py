"""config.toml under faults, with real files and real permissions: writes that fail (an immutable file, made with
``chattr +i``), backups bounded by ``config_backups``, and a file its owner made read-only (0444).

The tests run as root, which writes a 0444 file anyway: the refusal must come from the mode bits. A write is made
to fail for real with ``chattr +i`` (a file system without the flag fails the test, saying so). The same faults are
driven through ``blazar keys``/``blazar config init`` (real subprocesses) and the HTTP routes of a real
``blazar serve`` (no engine needed: the key routes never start one).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from blazar.config import Config, load_config_text
from blazar.config.write import ConfigWriteError, backups, write_config
from blazar.errors import ConfigError
from blazar.tenancy import keys
from tests.conftest import Daemon, blazar_cmd, make_daemon

SECRET = "sk-faults-config-0123456789abcdef"
OTHER = "sk-faults-other-0123456789abcdef"
KEYS = f'[[keys]]\nname = "admin"\nsecret = "{SECRET}"\n\n[[keys]]\nname = "ci"\nsecret = "{OTHER}"\n'
AUTH = {"authorization": f"Bearer {SECRET}"}
NO_ENV: dict[str, str] = {}


@pytest.fixture()
def immutable() -> Iterator[Callable[[Path], None]]:
    """``immutable(path)`` sets the file's immutable flag (every write, rename over it and unlink fail, even for
    root); cleared again after the test so ``tmp_path`` can be removed."""
    made: list[Path] = []

    def make(path: Path) -> None:
        if shutil.which("chattr") is None:  # Debian's e2fsprogs, an essential package: never skipped silently
            pytest.fail(
                "chattr is needed to make a write fail for real: apt-get install e2fsprogs", pytrace=False
            )
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.fail(
                f"{path}'s file system has no immutable flag ({done.stderr.strip()}): run the tests with"
                " --basetemp on ext4, xfs or btrfs",
                pytrace=False,
            )
        made.append(path)

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True, check=False)


def config_file(directory: Path, text: str = KEYS) -> Path:
    path = directory / "config.toml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def leftovers(path: Path) -> list[str]:
    """What a write may leave beside the config file but the file itself and its lock: backups and temp files."""
    return sorted(
        p.name
        for p in path.parent.iterdir()
        if p.name.startswith((path.name, f".{path.name}")) and p.name not in (path.name, path.name + ".lock")
    )


# --- a write that fails removes the backup it made ---------------------------------------------------------------


def test_failed_writes_leave_no_backups_behind(tmp_path: Path, immutable: Callable[[Path], None]) -> None:
    path = config_file(tmp_path)
    before = path.read_bytes()
    immutable(path)
    for _ in range(25):  # a client retrying in a loop
        with pytest.raises(ConfigWriteError) as caught:
            keys.rotate_key(path, "admin", env=NO_ENV)
        message = str(caught.value)
        assert "cannot write" in message and "the old file is unchanged" in message
        assert SECRET not in message and OTHER not in message
    assert path.read_bytes() == before
    assert backups(path) == [] and leftovers(path) == []


def test_a_failed_write_keeps_the_earlier_backups(tmp_path: Path, immutable: Callable[[Path], None]) -> None:
    path = config_file(tmp_path)
    keys.rotate_key(path, "admin", env=NO_ENV)
    [kept] = backups(path)
    immutable(path)
    with pytest.raises(ConfigWriteError):
        keys.rotate_key(path, "admin", env=NO_ENV)
    assert backups(path) == [kept] and SECRET in kept.read_text()


# --- config_backups bounds what is kept ----------------------------------------------------------------------------


def test_config_backups_is_a_setting_with_a_default_of_10(tmp_path: Path) -> None:
    assert Config().config_backups == 10
    path = tmp_path / "config.toml"
    assert load_config_text("config_backups = 3\n", path, NO_ENV).config_backups == 3
    assert load_config_text("config_backups = 0\n", path, NO_ENV).config_backups == 0
    for bad in ("-1", "1.5", '"3"', "true"):
        with pytest.raises(ConfigError, match="config_backups"):
            load_config_text(f"config_backups = {bad}\n", path, NO_ENV)


@pytest.mark.parametrize("kept", [3, 1, 0])
def test_backups_are_bounded_by_config_backups_oldest_removed_first(tmp_path: Path, kept: int) -> None:
    path = config_file(tmp_path, f"config_backups = {kept}\n{KEYS}")
    secrets = [SECRET]
    for _ in range(6):
        _, secret = keys.rotate_key(path, "admin", env=NO_ENV)
        secrets.append(secret)
    found = backups(path)
    assert len(found) == kept
    # the newest copies stay: backup i holds the secret that was current before the write that made it
    assert [secrets[-2 - i] in bak.read_text() for i, bak in enumerate(reversed(found))] == [True] * kept
    assert leftovers(path) == sorted(p.name for p in found)


def test_config_init_force_prunes_by_the_old_files_setting(tmp_path: Path) -> None:
    path = config_file(tmp_path, f"config_backups = 2\n{KEYS}")
    for _ in range(4):
        keys.rotate_key(path, "admin", env=NO_ENV)
    env = {**clean_env(), "BLAZAR_CONFIG": str(path), "HOME": str(tmp_path)}
    done = blazar_cmd("config", "init", "--force", env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert len(backups(path)) == 2


# --- a file its owner made read-only is refused --------------------------------------------------------------------


def test_a_read_only_config_is_refused_not_replaced(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    before = path.read_bytes()
    path.chmod(0o444)
    for edit in (
        lambda: keys.rotate_key(path, "admin", env=NO_ENV),
        lambda: keys.add_key(path, "new", env=NO_ENV),
        lambda: keys.remove_key(path, "ci", env=NO_ENV),
        lambda: write_config(path, "port = 2\n", before),
    ):
        with pytest.raises(ConfigWriteError) as caught:
            edit()
        message = str(caught.value)
        assert str(path) in message and "read-only" in message and f"chmod u+w {path}" in message
        assert SECRET not in message and OTHER not in message
    assert path.read_bytes() == before
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert leftovers(path) == []


def test_a_group_writable_but_owner_read_only_file_is_refused_too(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    path.chmod(0o464)  # the owner's own write bit is what counts
    with pytest.raises(ConfigWriteError, match="read-only"):
        keys.rotate_key(path, "admin", env=NO_ENV)
    assert stat.S_IMODE(path.stat().st_mode) == 0o464


# --- the CLI: one red line and exit 1 ------------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("BLAZAR_")}


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert SECRET not in done.stderr + done.stdout and OTHER not in done.stderr + done.stdout
    return lines[0]


CLI_WRITES = [
    ("keys", "rotate", "admin"),
    ("keys", "add", "new"),
    ("keys", "rm", "ci"),
    ("config", "init", "--force"),
]


@pytest.mark.parametrize("args", CLI_WRITES, ids=lambda a: " ".join(a))
def test_the_cli_refuses_a_read_only_config_in_one_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    path = config_file(tmp_path)
    before = path.read_bytes()
    path.chmod(0o444)
    env = {**clean_env(), "BLAZAR_CONFIG": str(path), "HOME": str(tmp_path)}
    line = one_error_line(blazar_cmd(*args, env=env, check=False))
    assert "read-only" in line and "chmod u+w" in line
    assert path.read_bytes() == before and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert leftovers(path) == []


@pytest.mark.parametrize("args", CLI_WRITES, ids=lambda a: " ".join(a))
def test_the_cli_reports_a_failed_write_in_one_line_and_leaves_no_backup(
    tmp_path: Path, immutable: Callable[[Path], None], args: tuple[str, ...]
) -> None:
    path = config_file(tmp_path)
    before = path.read_bytes()
    immutable(path)
    env = {**clean_env(), "BLAZAR_CONFIG": str(path), "HOME": str(tmp_path)}
    line = one_error_line(blazar_cmd(*args, env=env, check=False))
    assert "cannot write" in line
    assert path.read_bytes() == before and leftovers(path) == []


# --- the HTTP routes: the caller's dialect, the right status, no stack ----------------------------------------------


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[Daemon]:
    d = make_daemon(tmp_path / "d", KEYS)
    (d.root / "config.toml").chmod(0o600)
    d.start()
    try:
        yield d
    finally:
        d.stop()


def error_of(r: httpx.Response) -> str:
    body = r.json()
    assert set(body) == {"error"} and isinstance(body["error"]["message"], str), body  # OpenAI's error shape
    message: str = body["error"]["message"]
    assert SECRET not in r.text and OTHER not in r.text and "Traceback" not in r.text
    return message


def key_names(d: Daemon) -> list[str]:
    r = httpx.get(d.url + "/api/keys", headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    return [k["name"] for k in r.json()["keys"]]


def test_the_key_routes_refuse_a_read_only_config_with_a_409(served: Daemon) -> None:
    path = served.root / "config.toml"
    before = path.read_bytes()
    path.chmod(0o444)
    for method, route, body in (
        ("POST", "/api/keys/rotate", {"name": "admin"}),
        ("POST", "/api/keys", {"name": "new"}),
        ("DELETE", "/api/keys", {"name": "ci"}),
    ):
        r = httpx.request(method, served.url + route, json=body, headers=AUTH, timeout=10)
        assert r.status_code == 409, (route, r.status_code, r.text)
        message = error_of(r)
        assert "config.toml is read-only" in message and "chmod u+w config.toml" in message
        assert str(served.root) not in message  # the routes name the file, never where it lives
    assert path.read_bytes() == before and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert leftovers(path) == []
    assert key_names(served) == ["admin", "ci"]  # the old secret still works and nothing changed
    assert "Traceback" not in served.log.read_text()


def test_the_key_routes_report_a_failed_write_as_a_500_and_leave_no_backup(
    served: Daemon, immutable: Callable[[Path], None]
) -> None:
    path = served.root / "config.toml"
    before = path.read_bytes()
    immutable(path)
    for method, route, body in (
        ("POST", "/api/keys/rotate", {"name": "admin"}),
        ("POST", "/api/keys", {"name": "new"}),
        ("DELETE", "/api/keys", {"name": "ci"}),
    ) * 3:
        r = httpx.request(method, served.url + route, json=body, headers=AUTH, timeout=10)
        assert r.status_code == 500, (route, r.status_code, r.text)
        message = error_of(r)
        assert message.startswith("cannot write config.toml") and "the old file is unchanged" in message
    assert path.read_bytes() == before and leftovers(path) == []
    assert key_names(served) == ["admin", "ci"]  # the live keys were rolled back each time
    assert "Traceback" not in served.log.read_text()
