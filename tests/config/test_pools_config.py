"""``[[pools]]`` in config.toml: a model name over several ``[[remotes]]``, validated with messages that teach."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.config import load_config_text
from blazar.errors import ConfigError
from blazar.supervisor.remotes import Pool, Remotes

PATH = Path("/etc/blazar/config.toml")
TWO = '[[remotes]]\nname = "a"\nurl = "http://10.0.0.5:11435/v1"\n[[remotes]]\nname = "b"\nurl = "http://10.0.0.6:11435/v1"\nparallel = 2\n'


def test_a_pool_loads_and_routes_its_name() -> None:
    # the pool's table may come before the remotes it names
    cfg = load_config_text('[[pools]]\nname = "llama3"\nremotes = ["a", "b"]\n' + TWO, PATH, {})
    [pool] = cfg.pools
    assert (pool.name, pool.remotes, pool.model, pool.policy, pool.affinity_bound) == (
        "llama3:latest", ("a", "b"), "llama3", "prefix", 4,
    )  # fmt: skip
    remotes = Remotes(cfg.remotes, cfg.pools)
    for asked in ("llama3", "llama3:latest"):
        hit = remotes.route(asked)
        assert hit is not None and isinstance(hit[0], Pool) and hit[1] == "llama3"
    assert hit[0].parallel == 6 and hit[0].admission_key == "@pool/llama3:latest"
    assert remotes.route("llama3:8b") is None and remotes.route("a:llama3") is not None
    assert [r.name for r in remotes.pooled()] == ["a", "b"]
    least = load_config_text(
        TWO + '[[pools]]\nname = "m:q4"\nremotes = ["b"]\nmodel = "x"\npolicy = "least"\n', PATH, {}
    )
    assert (least.pools[0].name, least.pools[0].model, least.pools[0].policy) == ("m:q4", "x", "least")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[pools]]\nname = "p"\nremotes = ["a", "c"]\n', "'pools[0].remotes' names 'c', which is no [[remotes]] name (a, b)"),
        ('[[pools]]\nname = "p"\n', "'pools[0]' (p) names no remotes"),
        ('[[pools]]\nname = "p"\nremotes = ["a", "a"]\n', "names a remote twice"),
        ('[[pools]]\nname = "a:llama3"\nremotes = ["a"]\n', "already means model 'llama3' on remote 'a'"),
        ('[[pools]]\nname = "p"\nremotes = ["a"]\npolicy = "random"\n', "'pools[0].policy' must be one of \"prefix\", \"least\""),
        ('[[pools]]\nname = "p"\nremotes = ["a"]\naffinity_bound = -1\n', "'pools[0].affinity_bound' must be an integer"),
        ('[[pools]]\nname = "p"\nremotes = ["a"]\nhosts = 2\n', "unknown key 'pools[0].hosts'"),
        ('[[pools]]\nname = "p"\nremotes = ["a"]\n[[pools]]\nname = "p:latest"\nremotes = ["b"]\n', "two [[pools]] are named 'p:latest'"),
        ('[[pools]]\nname = "p"\nremotes = "a"\n', "'pools[0].remotes' must be an array of strings"),
        ('pools = 1\n', "key 'pools' must be an array of [[pools]] tables"),
    ],
)  # fmt: skip
def test_a_bad_pool_is_refused_with_the_fix(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config_text(text + TWO, PATH, {})  # a pool may come before its remotes
    assert message in str(e.value)
