"""Tests for blazar.tenancy.keys: the seed's strings, authentication, scopes, management rights, and key management
through real config files (comments kept, ``.bak`` written, failed writes rolled back, refusals).

They own only files under ``tmp_path`` and pass an explicit ``env`` to every call; no output may hold a secret.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import os
import tempfile
import threading
from pathlib import Path

import pytest

from blazar.config import KeyLimits, load_config, load_config_text
from blazar.config.write import ConfigWriteError, backups
from blazar.errors import BlazarError, ConfigError
from blazar.tenancy import keys
from blazar.tenancy.keys import (
    NO_KEYS_MESSAGE,
    UNAUTHORIZED_BODY,
    UNAUTHORIZED_MESSAGE,
    KeyConflict,
    KeyCtx,
    KeyForbidden,
    KeyRegistry,
    KeysError,
    Unauthorized,
    UnknownKey,
    add_key,
    allows_model,
    list_keys,
    management_authorized,
    remove_key,
    resolve_secret,
    rotate_key,
)

ADMIN = "admin-secret-0123456789"
CI = "ci-secret-abcdefghijklm"
OPS = "ops-secret-from-the-env"

BASE = f"""# my blazar config
port = 8080  # custom port
log_level = "debug"

# the admin key
[[keys]]
name = "admin"
secret = "{ADMIN}"

# ci runners
[[keys]]
name = "ci"
secret = "{CI}"
models = ["smollm2"]
rpm = 60

# tuned model
[models.smollm2]
ctx_size = 8192  # long prompts
"""


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home)}


@pytest.fixture()
def cfg(tmp_path: Path) -> Path:
    path = tmp_path / "cfg" / "config.toml"
    path.parent.mkdir()
    path.write_text(BASE)
    return path


def registry_for(path: Path, env: dict[str, str]) -> KeyRegistry:
    return KeyRegistry(load_config(path, env))


def assert_hidden(text: str, *secrets: str) -> None:
    for secret in (ADMIN, CI, OPS, *secrets):
        assert secret not in text


# --- the seed's strings ------------------------------------------------------------------------------------


def test_the_seed_strings_are_exact() -> None:
    assert UNAUTHORIZED_BODY == (
        '{"error":{"message":"missing or invalid API key (Authorization: Bearer or x-api-key)",'
        '"type":"blazar_error","code":401}}'
    )
    assert json.loads(UNAUTHORIZED_BODY) == {
        "error": {"message": UNAUTHORIZED_MESSAGE, "type": "blazar_error", "code": 401}
    }
    assert NO_KEYS_MESSAGE == (
        "no keys configured: add the first [[keys]] entry in config.toml (or BLAZAR_KEYS env) and restart"
    )
    assert str(Unauthorized()) == UNAUTHORIZED_MESSAGE
    assert Unauthorized.status == 401
    assert KeyForbidden.status == 403
    assert UnknownKey.status == 404
    assert KeyConflict.status == 409
    assert issubclass(KeysError, BlazarError)


# --- authentication ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("authorization", "x_api_key", "expected"),
    [
        (None, None, None),
        ("", "", None),
        ("Bearer abc", None, "abc"),
        ("bearer   abc  ", None, "abc"),
        ("BEARER abc", "xyz", "abc"),
        ("Bearer ", "xyz", "xyz"),
        ("Basic dXNlcjpwYXNz", "xyz", "xyz"),
        ("Basic dXNlcjpwYXNz", None, None),
        (None, "  xyz ", "xyz"),
        ("abc", None, None),
    ],
)
def test_resolve_secret(authorization: str | None, x_api_key: str | None, expected: str | None) -> None:
    assert resolve_secret(authorization, x_api_key) == expected


def test_authenticate(cfg: Path, env: dict[str, str]) -> None:
    reg = registry_for(cfg, env)
    assert reg.auth_active
    assert len(reg) == 2
    admin = reg.authenticate(f"Bearer {ADMIN}", None)
    assert admin == KeyCtx(name="admin", weight=1.0, models=frozenset(), limits=KeyLimits())
    ci = reg.authenticate(None, CI)
    assert ci is not None and ci.name == "ci"
    assert ci.models == frozenset({"smollm2:latest"})
    assert ci.limits.rpm == 60
    assert reg.get("ci") == ci


def test_bearer_is_preferred_over_x_api_key(cfg: Path, env: dict[str, str]) -> None:
    reg = registry_for(cfg, env)
    found = reg.authenticate(f"Bearer {CI}", ADMIN)
    assert found is not None and found.name == "ci"
    # A wrong Bearer secret is not rescued by a right x-api-key: the Bearer secret is the one presented.
    assert reg.authenticate("Bearer wrong-secret-000000000", ADMIN) is None
    found = reg.authenticate("Basic abc", ADMIN)
    assert found is not None and found.name == "admin"


@pytest.mark.parametrize(
    "presented",
    [
        ADMIN[:-1],
        ADMIN + "x",
        ADMIN.upper(),
        " ",
        "",
        "x" * 500,
        ADMIN[:10],
        "admin-secret-0123456788",
        "é" * 20,
    ],
)
def test_wrong_secrets_are_refused(cfg: Path, env: dict[str, str], presented: str) -> None:
    reg = registry_for(cfg, env)
    assert reg.authenticate(f"Bearer {presented}", None) is None
    assert reg.authenticate(None, presented) is None


def test_the_secret_check_has_no_early_exit(
    cfg: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Matching and non-matching secrets take the same path: one compare_digest on 32-byte digests."""
    reg = registry_for(cfg, env)
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for presented in (ADMIN, CI, "nearly-" + ADMIN, ADMIN[:-1] + "X", "z" * 64):
        calls.clear()
        reg.authenticate(f"Bearer {presented}", None)
        assert calls == [(32, 32)]


def test_no_keys_means_auth_is_off(tmp_path: Path, env: dict[str, str]) -> None:
    reg = KeyRegistry(load_config_text("port = 1\n", tmp_path / "c.toml", env))
    assert not reg.auth_active
    assert len(reg) == 0
    assert reg.authenticate(f"Bearer {ADMIN}", None) is None
    assert reg.listing() == ()


def test_env_keys_authenticate(cfg: Path, env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = f"ops={OPS}"
    reg = registry_for(cfg, env)
    ops = reg.authenticate(None, OPS)
    assert ops is not None and ops.name == "ops" and ops.full_access


def test_registry_repr_has_no_secret(cfg: Path, env: dict[str, str]) -> None:
    reg = registry_for(cfg, env)
    assert repr(reg) == "KeyRegistry(2 keys: admin, ci)"
    assert_hidden(repr(reg.config))
    assert_hidden(repr(reg.listing()))


def test_apply_swaps_and_returns_the_previous_config(cfg: Path, env: dict[str, str]) -> None:
    reg = registry_for(cfg, env)
    old = reg.config
    new = dataclasses.replace(old, keys=old.keys[:1])
    assert reg.apply(new) is old
    assert reg.authenticate(None, CI) is None
    assert reg.apply(old) is new
    assert reg.authenticate(None, CI) is not None


# --- scopes and management ---------------------------------------------------------------------------------


def test_scopes(cfg: Path, env: dict[str, str]) -> None:
    reg = registry_for(cfg, env)
    admin = reg.get("admin")
    ci = reg.get("ci")
    assert admin is not None and ci is not None
    assert allows_model(admin, "anything:at-all")
    assert allows_model(admin, "")
    assert allows_model(ci, "smollm2")
    assert not allows_model(
        ci, " smollm2:latest "
    )  # names are taken exactly, never trimmed into another    assert not allows_model(ci, "smollm2:1.7b")
    assert not allows_model(ci, "qwen")
    assert not allows_model(ci, "")
    assert keys.scope_denied_message(ci, "qwen") == (
        "key 'ci' may not use model 'qwen:latest'; it is limited to smollm2:latest. "
        "Use one of those, or add the model to this key's models in config.toml"
    )


def test_management_rights(cfg: Path, env: dict[str, str], tmp_path: Path) -> None:
    reg = registry_for(cfg, env)
    admin, ci = reg.get("admin"), reg.get("ci")
    assert management_authorized(admin)
    assert not management_authorized(ci)
    assert not management_authorized(None)
    reg.check_management(admin)
    with pytest.raises(Unauthorized) as info:
        reg.check_management(None)
    assert info.value.status == 401
    with pytest.raises(KeyForbidden) as denied:
        reg.check_management(ci)
    assert denied.value.status == 403
    assert str(denied.value) == (
        "key 'ci' is limited to models (smollm2:latest) and cannot manage keys; "
        "use a key with full access (one without a models list)"
    )
    open_reg = KeyRegistry(load_config_text(None, tmp_path / "none.toml", env))
    with pytest.raises(KeyForbidden) as authless:
        open_reg.check_management(None)
    assert str(authless.value) == NO_KEYS_MESSAGE
    assert authless.value.status == 403


# --- key management round trips ----------------------------------------------------------------------------


def test_add_keeps_comments_and_unrelated_keys(cfg: Path, env: dict[str, str]) -> None:
    key, secret = add_key(cfg, "batch", ["qwen2.5:7b", "smollm2"], weight=0.5, rpm=10, tpm=2000, env=env)
    text = cfg.read_text()
    for line in BASE.splitlines():
        assert line in text
    assert secret.startswith("sk-blazar-") and len(secret) >= 40
    assert key.secret == secret
    assert key.models == ("qwen2.5:7b", "smollm2:latest")
    assert key.weight == 0.5 and key.limits == KeyLimits(0, 10, 2000, 0)
    loaded = load_config(cfg, env)
    assert loaded.port == 8080 and loaded.log_level == "debug"
    assert loaded.model_override("smollm2").ctx_size == 8192
    assert [k.name for k in loaded.keys] == ["admin", "ci", "batch"]
    assert loaded.keys[2] == key
    assert "max_concurrent" not in text and "daily_tokens" not in text  # zeros are defaults, not written
    (bak,) = backups(cfg)
    assert bak.read_text() == BASE


def test_add_with_a_given_secret_and_default_weight(cfg: Path, env: dict[str, str]) -> None:
    key, secret = add_key(cfg, "given", secret="given-secret-0123456789", env=env)
    assert secret == "given-secret-0123456789"
    assert key.full_access and key.weight == 1.0
    assert "weight" not in cfg.read_text().split('name = "given"')[1]


def test_add_creates_the_file(tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "new" / "dir" / "config.toml"
    _key, secret = add_key(path, "admin", env=env)
    assert path.read_text().startswith("# Blazar configuration.")
    assert backups(path) == []
    reg = registry_for(path, env)
    assert reg.authenticate(f"Bearer {secret}", None) is not None


def test_add_updates_a_live_registry(cfg: Path, env: dict[str, str]) -> None:
    reg = registry_for(cfg, env)
    _key, secret = add_key(cfg, "live", registry=reg, env=env)
    found = reg.authenticate(None, secret)
    assert found is not None and found.name == "live"


def test_rotate(cfg: Path, env: dict[str, str]) -> None:
    reg = registry_for(cfg, env)
    key, secret = rotate_key(cfg, "ci", registry=reg, env=env)
    assert secret != CI and key.secret == secret
    assert key.models == ("smollm2:latest",) and key.rpm == 60
    text = cfg.read_text()
    assert CI not in text and secret in text
    assert "# ci runners" in text and "# tuned model" in text
    assert reg.authenticate(None, CI) is None
    found = reg.authenticate(None, secret)
    assert found is not None and found.name == "ci"
    assert backups(cfg)[0].read_text() == BASE


def test_remove(cfg: Path, env: dict[str, str]) -> None:
    reg = registry_for(cfg, env)
    removed = remove_key(cfg, "ci", registry=reg, env=env)
    assert removed.name == "ci"
    text = cfg.read_text()
    assert CI not in text
    assert "# tuned model\n[models.smollm2]" in text
    assert "# the admin key" in text and "port = 8080  # custom port" in text
    assert [k.name for k in load_config(cfg, env).keys] == ["admin"]
    assert reg.authenticate(None, CI) is None


def test_list_keys_is_redacted(cfg: Path, env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = f"ops={OPS}"
    listing = list_keys(cfg, env)
    assert [(k.name, k.secret, k.source, k.full_access) for k in listing] == [
        ("admin", "…6789", "config", True),
        ("ci", "…jklm", "config", False),
        ("ops", "…-env", "env", True),
    ]
    assert listing[1].models == ("smollm2:latest",)
    assert listing[1].as_dict() == {
        "name": "ci",
        "secret": "…jklm",
        "models": ["smollm2:latest"],
        "full_access": False,
        "weight": 1.0,
        "max_concurrent": 0,
        "rpm": 60,
        "tpm": 0,
        "daily_tokens": 0,
        "source": "config",
    }
    assert_hidden(repr(listing) + json.dumps([k.as_dict() for k in listing]))
    _key, secret = add_key(cfg, "gen", env=env)
    gen = list_keys(cfg, env)[2]
    assert gen.name == "gen" and gen.secret == f"sk-bl…{secret[-4:]}"
    assert list_keys(cfg.parent / "absent.toml", {"HOME": env["HOME"]}) == ()


def test_a_failed_write_leaves_the_file_and_rolls_the_registry_back(
    cfg: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = registry_for(cfg, env)
    before = cfg.read_bytes()
    old_config = reg.config

    def disk_full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(ConfigWriteError) as info:
        rotate_key(cfg, "ci", registry=reg, env=env)
    assert "the old file is unchanged" in str(info.value)
    with pytest.raises(ConfigWriteError):
        add_key(cfg, "extra", registry=reg, env=env)
    with pytest.raises(ConfigWriteError):
        remove_key(cfg, "ci", registry=reg, env=env)
    assert cfg.read_bytes() == before
    assert reg.config is old_config
    assert reg.authenticate(None, CI) is not None
    assert reg.get("extra") is None
    assert [p for p in cfg.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_a_temp_file_that_cannot_be_created_fails_cleanly(
    cfg: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = registry_for(cfg, env)
    before = cfg.read_bytes()

    def read_only(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(ConfigWriteError, match="Permission denied; the old file is unchanged"):
        add_key(cfg, "extra", registry=reg, env=env)
    assert cfg.read_bytes() == before
    assert reg.get("extra") is None


def refused(exc_type: type[BlazarError], cfg: Path, call: object, *args: object, **kwargs: object) -> str:
    before = cfg.read_bytes()
    assert callable(call)
    with pytest.raises(exc_type) as info:
        call(*args, **kwargs)
    assert cfg.read_bytes() == before
    assert backups(cfg) == []
    message = str(info.value)
    assert_hidden(message)
    return message


def test_last_admin_protection(cfg: Path, env: dict[str, str]) -> None:
    message = refused(KeyConflict, cfg, remove_key, cfg, "admin", env=env)
    assert message == (
        "'admin' is the last key with full access and other keys remain, so nobody could manage keys any more; "
        "add another full-access key first (blazar keys add NAME, without --models)"
    )
    add_key(cfg, "admin2", env=env)
    remove_key(cfg, "admin", env=env)
    assert [k.name for k in load_config(cfg, env).keys] == ["ci", "admin2"]


def test_an_env_admin_counts_as_an_admin(cfg: Path, env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = f"ops={OPS}"
    remove_key(cfg, "admin", env=env)
    assert OPS not in cfg.read_text()


def test_the_last_key_needs_explicit_consent(tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "config.toml"
    add_key(path, "only", env=env)
    message = refused(KeyConflict, path, remove_key, path, "only", env=env)
    assert "turns authentication off" in message and "--disable-auth" in message
    remove_key(path, "only", allow_auth_off=True, env=env)
    assert load_config(path, env).keys == ()


def test_duplicate_names_are_refused(cfg: Path, env: dict[str, str]) -> None:
    message = refused(KeyConflict, cfg, add_key, cfg, "ci", env=env)
    assert message == (
        f"a key named 'ci' already exists (in {cfg}); choose another name, "
        "or give it a new secret with: blazar keys rotate ci"
    )
    env["BLAZAR_KEYS"] = f"ops={OPS}"
    message = refused(KeyConflict, cfg, add_key, cfg, "ops", env=env)
    assert (
        message
        == "a key named 'ops' already exists (in the BLAZAR_KEYS environment variable); choose another name"
    )


def test_env_keys_cannot_be_changed_through_the_file(cfg: Path, env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = f"ops={OPS}"
    for call in (remove_key, rotate_key):
        message = refused(KeyConflict, cfg, call, cfg, "ops", env=env)
        assert message == (
            f"key 'ops' comes from the BLAZAR_KEYS environment variable, not {cfg}; "
            "change BLAZAR_KEYS and restart instead"
        )


def test_unknown_keys(cfg: Path, env: dict[str, str]) -> None:
    for call in (remove_key, rotate_key):
        message = refused(UnknownKey, cfg, call, cfg, "ghost", env=env)
        assert message == f"no key named 'ghost' in {cfg}; list them with: blazar keys ls"


def test_the_first_key_must_have_full_access(tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "config.toml"
    path.write_text("port = 1\n")
    message = refused(KeyConflict, path, add_key, path, "scoped", ["smollm2"], env=env)
    assert message.startswith("the first key must have full access")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {"name": "bad name"},
            "key name 'bad name' must be 1-64 characters, only letters, digits, '.', '_' and '-'",
        ),
        ({"name": ""}, "key name '' must be 1-64 characters"),
        ({"name": "n" * 65}, "key name 'nnnnnnnnnnnnnnnnnnnn...' (65 characters) must be 1-64 characters"),
        ({"models": ["../x"]}, "'../x' is not a valid model name: invalid model name '../x:latest'"),
        ({"models": ["m:"]}, "'m:' is not a valid model name: model name 'm:' ends with ':' but has no tag"),
        ({"models": [""]}, "'' is not a valid model name: model name is empty"),  # not full access
        (
            {"models": ["smollm2", " "]},
            "' ' is not a valid model name: invalid model name ' ': it starts with U+0020 (a space)",
        ),
        ({"weight": 0}, "weight must be a number > 0, got 0"),
        ({"weight": float("nan")}, "weight must be a number > 0, got nan"),
        ({"rpm": -1}, "rpm must be an integer >= 0 (0 = unlimited), got -1"),
        ({"daily_tokens": 1.5}, "daily_tokens must be an integer >= 0 (0 = unlimited), got 1.5"),
        (
            {"secret": "short"},
            "a key secret must be at least 16 printable ASCII characters without spaces "
            "(the one given has 5 characters); omit it to have one generated",
        ),
    ],
)
def test_bad_arguments(cfg: Path, env: dict[str, str], kwargs: dict[str, object], expected: str) -> None:
    args: dict[str, object] = {"name": "new", "env": env, **kwargs}
    message = refused(KeysError, cfg, add_key, cfg, **args)
    assert message.startswith(expected)


def test_a_reused_secret_is_refused_without_showing_it(cfg: Path, env: dict[str, str]) -> None:
    message = refused(KeysError, cfg, add_key, cfg, "dup", secret=CI, env=env)
    assert message.startswith("the change would make the config invalid, so nothing was written: ")
    assert "reuses the secret of keys[1]" in message
    message = refused(KeysError, cfg, rotate_key, cfg, "admin", secret=CI, env=env)
    assert "reuses the secret" in message


def test_an_invalid_file_is_not_touched(cfg: Path, env: dict[str, str]) -> None:
    cfg.write_text("bogus = 1\n" + BASE)
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        add_key(cfg, "new", env=env)
    assert backups(cfg) == []


def test_split_key_tables_are_refused_rather_than_reshuffled(tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[[keys]]\nname = "a"\nsecret = "{ADMIN}"\n\n# models\n[models.m]\nctx_size = 1\n\n'
        f'[[keys]]\nname = "b"\nsecret = "{CI}"\n# trailing note\n'
    )
    before = path.read_bytes()
    try:
        remove_key(path, "b", env=env)
    except ConfigWriteError as exc:
        assert "keep all [[keys]] tables together" in str(exc)
        assert path.read_bytes() == before
    else:  # tomlkit managed it: then nothing else may have been lost
        text = path.read_text()
        assert "# models" in text and "# trailing note" in text and CI not in text


def test_concurrent_adds_all_land(cfg: Path, env: dict[str, str]) -> None:
    errors: list[BaseException] = []

    def add(n: int) -> None:
        try:
            add_key(cfg, f"k{n}", env=env)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(k.name for k in load_config(cfg, env).keys) == sorted(
        ["admin", "ci", *(f"k{n}" for n in range(6))]
    )
    assert "# tuned model" in cfg.read_text()


def test_no_secret_in_any_error(cfg: Path, env: dict[str, str]) -> None:
    env["BLAZAR_KEYS"] = f"ops={OPS}"
    reg = registry_for(cfg, env)
    ci = reg.get("ci")
    messages = [keys.scope_denied_message(ci, "other")] if ci is not None else []
    for call in (
        lambda: remove_key(cfg, "ops", env=env),
        lambda: add_key(cfg, "x", secret=ADMIN, env=env),
        lambda: rotate_key(cfg, "ci", secret=OPS, env=env),
        lambda: reg.check_management(ci),
    ):
        with pytest.raises(BlazarError) as info:
            call()
        messages.append(str(info.value))
        messages.append(repr(info.value))
    assert_hidden("\n".join(messages))


def test_an_edit_keeps_crlf_line_ends_and_a_bom(cfg: Path, env: dict[str, str]) -> None:
    """A file written on Windows (CRLF, a UTF-8 BOM) is edited in its own conventions: only the key's lines change."""
    before = b"\xef\xbb\xbf" + BASE.replace("\n", "\r\n").encode()
    cfg.write_bytes(before)
    add_key(cfg, "batch", ["smollm2"], env=env)
    after = cfg.read_bytes()
    assert after.startswith(b"\xef\xbb\xbf") and b"\n" not in after.replace(b"\r\n", b"")
    assert all(line in after.split(b"\r\n") for line in before.split(b"\r\n"))
    assert [k.name for k in load_config(cfg, env).keys] == ["admin", "ci", "batch"]
    remove_key(cfg, "batch", env=env)
    again = cfg.read_bytes()
    assert again.startswith(b"\xef\xbb\xbf") and b"\n" not in again.replace(b"\r\n", b"")
    assert [k.name for k in load_config(cfg, env).keys] == ["admin", "ci"]
