"""``Pool.ranked``: the order a pool tries its hosts in (prefix affinity within a bound, least loaded, those down
last), pure apart from the health each host holds."""

from __future__ import annotations

from pathlib import Path

from blazar.config import load_config_text
from blazar.supervisor.remotes import Pool, Remotes

HOSTS = ("a", "b", "c")


def pool(policy: str = "prefix", bound: int = 2) -> Pool:
    text = "".join(
        f'[[remotes]]\nname = "{h}"\nurl = "http://10.0.0.{i}:11435/v1"\n' for i, h in enumerate(HOSTS)
    )
    text += (
        f'[[pools]]\nname = "p"\nremotes = {list(HOSTS)!r}\npolicy = "{policy}"\naffinity_bound = {bound}\n'
    )
    cfg = load_config_text(text.replace("'", '"'), Path("/etc/blazar/config.toml"), {})
    return Remotes(cfg.remotes, cfg.pools).pools["p:latest"]


def names(p: Pool, key: bytes | None) -> list[str]:
    return [h.name for h in p.ranked(key)]


def test_a_conversation_keeps_its_host_until_it_is_loaded_past_the_bound() -> None:
    p = pool(bound=2)
    conversations = [f"conversation {i}".encode() for i in range(30)]
    homes = {k: names(p, k)[0] for k in conversations}
    assert set(homes.values()) == set(HOSTS)  # rendezvous hashing spreads them
    key = conversations[0]
    home = next(h for h in p.hosts if h.name == homes[key])
    assert names(p, key) == names(p, key)
    home.outstanding = 2  # two more than the least loaded (0): still within the bound
    assert names(p, key)[0] == home.name
    home.outstanding = 3  # past it: the least loaded first, the home host last
    ranked = names(p, key)
    assert ranked[0] != home.name and ranked[-1] == home.name
    others = [h for h in p.hosts if h is not home]
    for h in others:
        h.outstanding = 2  # the least loaded is now 2 again: back within the bound
    assert names(p, key)[0] == home.name


def test_least_loaded_first_without_a_key_or_affinity() -> None:
    for p, key in ((pool(), None), (pool("least"), b"conversation")):
        load = {"a": 3, "b": 1, "c": 2}
        for h in p.hosts:
            h.outstanding = load[h.name]
        assert names(p, key) == ["b", "c", "a"]
        for h in p.hosts:
            h.outstanding = 0
        assert names(p, key) == ["a", "b", "c"]  # ties: the pool's order


def test_a_host_down_is_tried_last_and_one_answering_is_back() -> None:
    p = pool()
    key = b"conversation 1"
    home = names(p, key)[0]
    host = next(h for h in p.hosts if h.name == home)
    host.failed("connection refused")
    assert not host.up and names(p, key)[-1] == home
    host.outstanding = 0
    host.answered()
    assert host.up and names(p, key)[0] == home
    for h in p.hosts:
        h.failed("connection refused")
    assert sorted(names(p, key)) == sorted(HOSTS)  # none up: every one is tried, in the policy's order
