"""``[[remotes]]`` in config.toml: validated with messages that teach, and a remote's key never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.config import load_config_text
from blazar.errors import ConfigError
from blazar.supervisor.remotes import Remotes

PATH = Path("/etc/blazar/config.toml")


def load(text: str, env: dict[str, str] | None = None) -> object:
    return load_config_text(text, PATH, env or {})


def test_a_remote_loads_and_routes_its_names() -> None:
    cfg = load_config_text(
        '[[remotes]]\nname = "gpu-box"\nurl = "http://10.0.0.5:11435/v1/"\napi_key_env = "GPU_KEY"\n',
        PATH,
        {"GPU_KEY": "sk-secret-value-123"},
    )
    [remote] = cfg.remotes
    assert (remote.name, remote.url, remote.api_key, remote.parallel) == (
        "gpu-box", "http://10.0.0.5:11435/v1", "sk-secret-value-123", 4,
    )  # fmt: skip
    assert "sk-secret" not in repr(remote) and "sk-secret" not in repr(cfg)
    remotes = Remotes(cfg.remotes)
    hit = remotes.route("gpu-box:llama3:8b")
    assert hit is not None and hit[0].name == "gpu-box" and hit[1] == "llama3:8b"
    assert hit[0].path("/v1/chat/completions") == "/v1/chat/completions" and hit[0].where == "10.0.0.5:11435"
    assert remotes.route("smollm2:latest") is None and remotes.route("gpu-box:") is None
    assert remotes.route("gpu-box") is None
    said = "invalid key: you sent Bearer sk-secret-value-123"  # a server quoting what it got
    assert hit[0].scrub(said) == "invalid key: you sent Bearer <the remote's api_key>"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[remotes]]\nname = "a"\n', "'remotes[0]' (a) has no url"),
        ('[[remotes]]\nname = "a b"\nurl = "http://x/v1"\n', "key 'remotes[0].name' must be at most 64 letters"),
        ('[[remotes]]\nname = "a"\nurl = "ftp://x/v1"\n', "key 'remotes[0].url' must be an http:// or https:// URL"),
        ('[[remotes]]\nname = "a"\nurl = "http://x/v1"\nca_file = "ca.pem"\n', "its url is not https://"),
        ('[[remotes]]\nname = "a"\nurl = "https://x/v1"\nca_file = "/nonexistent/ca.pem"\n', "which cannot be read: No such file"),
        ('[[remotes]]\nname = "a"\nurl = "http://x/v1"\nparallel = 0\n', "'remotes[0].parallel' must be an integer"),
        ('[[remotes]]\nname = "a"\nurl = "http://x/v1"\nkey = "k"\n', "unknown key 'remotes[0].key' (did you mean"),
        ('[[remotes]]\nname = "a"\nurl = "http://x/v1"\napi_key_env = "NOPE"\n', "names NOPE, which is not set"),
        ('[[remotes]]\nname = "a"\nurl = "http://x/v1"\napi_key = "a secret"\n', "got 8 characters"),
        ('[[remotes]]\nname = "a"\nurl = "http://x/v1"\n[[remotes]]\nname = "a"\nurl = "http://y/v1"\n',
         "two [[remotes]] are named 'a'"),
        ('remotes = "x"\n', "key 'remotes' must be an array of [[remotes]] tables"),
    ],
)  # fmt: skip
def test_a_bad_remote_is_refused_with_the_fix(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(text)
    assert message in str(e.value)
    assert "a secret" not in str(e.value)


@pytest.mark.parametrize(
    "url", ["https://bob:hunter2@gpu/v1", "http://gpu/v1?key=hunter2", "http://gpu/v1#hunter2"]
)
def test_a_url_carrying_credentials_is_refused_without_repeating_them(url: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(f'[[remotes]]\nname = "a"\nurl = "{url}"\n')
    assert "no user, password, query or fragment" in str(e.value) and "hunter2" not in str(e.value)


def test_an_otlp_endpoint_is_an_http_url_without_credentials() -> None:
    assert load_config_text(
        'otlp_endpoint = "http://localhost:4318/v1/traces"\n', PATH, {}
    ).otlp_endpoint == ("http://localhost:4318/v1/traces")
    for bad in ("ftp://h/v1/traces", "http://user:hunter2@h/v1/traces", "http://h/v1/traces?token=hunter2"):
        with pytest.raises(ConfigError) as e:
            load(f'otlp_endpoint = "{bad}"\n')
        assert "no user, password or query" in str(e.value) and "hunter2" not in str(e.value)
