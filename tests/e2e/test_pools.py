"""End to end: ``[[pools]]``. Two real Blazars (each serving SmolLM2 on its own llama-server, each with one key: the
front's) are the hosts of a pool on a third, the front, which has no engine of its own and its own client key.

A conversation stays on the host its first messages hash to; distinct conversations spread over both hosts; a
conversation whose host is busy beyond the pool's bound goes to the other; a host that stops is failed over to
before any header, streamed or whole, with no error to the client; one that comes back gets its conversations
again; and the client's tokens are charged once, at the front, whichever host answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import ollama
import pytest

from tests.conftest import HANG, Assets, Daemon, cleanup, closing, make_daemon, provision, wait_for

pytestmark = pytest.mark.e2e

HOST_KEY = "sk-front-at-the-hosts-0123456789abcdef"
CLIENT = "sk-client-of-the-front-0123456789abcdef"
SERVED_BY = "x-blazar-remote"
QUESTIONS = [
    "Name a color.",
    "Name a fruit.",
    "Name a country.",
    "Name a planet.",
    "Name an animal.",
    "Name a river.",
    "Name a tree.",
    "Name a metal.",
]


def front_config(a: Daemon, b: Daemon) -> str:
    return (
        f'[[keys]]\nname = "client"\nsecret = "{CLIENT}"\ndaily_tokens = 1000000\n'
        + "".join(
            f'[[remotes]]\nname = "{n}"\nurl = "{h.url}/v1"\napi_key = "{HOST_KEY}"\n'
            for n, h in (("a", a), ("b", b))
        )
        + '[[pools]]\nname = "smol"\nremotes = ["a", "b"]\nmodel = "smollm2"\n'
        + '[[pools]]\nname = "tight"\nremotes = ["a", "b"]\nmodel = "smollm2"\naffinity_bound = 0\n'
    )


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Iterator[tuple[Daemon, Daemon]]:
    made = []
    for name in ("a", "b"):
        d = provision(
            make_daemon(
                tmp_path_factory.mktemp(f"host-{name}"), f'[[keys]]\nname = "front"\nsecret = "{HOST_KEY}"\n'
            ),
            assets,
        )
        d.start()
        made.append(d)
    yield made[0], made[1]
    for d in made:
        cleanup(d)


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory, hosts: tuple[Daemon, Daemon]) -> Iterator[Daemon]:
    d = make_daemon(tmp_path_factory.mktemp("front"), front_config(*hosts))
    d.start()
    yield d
    cleanup(d)


def ask(front: Daemon, question: str, pool: str = "smol", **extra: Any) -> httpx.Response:
    body = {"model": pool, "messages": [{"role": "user", "content": question}], "max_tokens": 4, **extra}
    return httpx.post(
        front.url + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {CLIENT}"},
        timeout=HANG,
    )


def served_by(front: Daemon, question: str, **extra: Any) -> str:
    r = ask(front, question, **extra)
    assert r.status_code == 200, r.text
    return r.headers[SERVED_BY]


def home_on(front: Daemon, host: str) -> str:
    """A question whose conversation the pool keeps on ``host``."""
    return next(q for q in QUESTIONS if served_by(front, q) == host)


def gauge(front: Daemon, series: str) -> float:
    text = httpx.get(front.url + "/metrics", headers={"authorization": f"Bearer {CLIENT}"}, timeout=HANG).text
    return float(next(x for x in text.splitlines() if x.startswith(series + " ")).split()[-1])


def tokens_left(front: Daemon) -> int:
    return int(gauge(front, 'blazar_key_daily_tokens_remaining{key="client"}'))


A_UP = 'blazar_pool_remote_up{pool="smol:latest",remote="a"}'


def test_conversations_spread_over_the_hosts_and_each_stays_on_one(front: Daemon) -> None:
    homes = {q: served_by(front, q) for q in QUESTIONS}
    assert set(homes.values()) == {"a", "b"}, homes
    for q, host in homes.items():  # again, and with a later turn of the same conversation
        assert served_by(front, q) == host
        turns = [
            {"role": "user", "content": q},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another one?"},
        ]
        body = {"model": "smol", "messages": turns, "max_tokens": 4}
        r = httpx.post(
            front.url + "/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {CLIENT}"},
            timeout=HANG,
        )
        assert r.status_code == 200 and r.headers[SERVED_BY] == host, (q, r.headers.get(SERVED_BY), r.text)
    listed = httpx.get(
        front.url + "/v1/models", headers={"authorization": f"Bearer {CLIENT}"}, timeout=HANG
    ).json()
    assert {"smol:latest", "tight:latest"} <= {m["id"] for m in listed["data"]}


def test_the_other_dialects_reach_a_pool_and_keep_its_conversations(front: Daemon) -> None:
    question = QUESTIONS[1]
    home = served_by(front, question)
    client = closing(ollama.Client(host=front.url, headers={"authorization": f"Bearer {CLIENT}"}))
    assert "smol:latest" in [m.model for m in client.list().models]  # what an Ollama UI lists
    said = client.chat(
        model="smol", messages=[{"role": "user", "content": question}], options={"num_predict": 4}
    )
    assert said.message.content
    claude = closing(anthropic.Anthropic(base_url=front.url, api_key=CLIENT, max_retries=0))
    raw = claude.messages.with_raw_response.create(
        model="smol", max_tokens=4, messages=[{"role": "user", "content": question}]
    )
    assert raw.headers[SERVED_BY] == home and raw.parse().content[0].type == "text"


def test_a_session_pin_reaches_the_host_that_serves_it(front: Daemon, hosts: tuple[Daemon, Daemon]) -> None:
    # the host's own Blazar keeps the conversation on its engine and slot: the pin is sent on with the request
    r = httpx.post(
        front.url + "/v1/chat/completions",
        json={"model": "smol", "messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 4},
        headers={"authorization": f"Bearer {CLIENT}", "x-blazar-session": "conv-7"},
        timeout=HANG,
    )
    assert r.status_code == 200, r.text
    host = dict(zip("ab", hosts, strict=True))[r.headers[SERVED_BY]]
    listed = httpx.get(
        host.url + "/api/session", headers={"authorization": f"Bearer {HOST_KEY}"}, timeout=HANG
    )
    assert listed.status_code == 200, listed.text
    assert "conv-7" in {s["session"] for s in listed.json()["sessions"]}, listed.text


def test_a_busy_host_sends_its_conversation_to_the_other(front: Daemon) -> None:
    question = QUESTIONS[0]
    home = served_by(front, question, model="tight")
    body = {
        "model": "tight",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 900,
        "ignore_eos": True,  # the test decides how long the held answer runs: long past the second request
        "stream": True,
    }
    headers = {"authorization": f"Bearer {CLIENT}"}
    with httpx.stream(
        "POST", front.url + "/v1/chat/completions", json=body, headers=headers, timeout=HANG
    ) as held:
        assert held.status_code == 200 and held.headers[SERVED_BY] == home
        lines = held.iter_lines()  # kept: a generator dropped would close the stream
        next(lines)  # its first event: it is in flight on its home host
        other = ask(front, question, "tight")
        assert other.status_code == 200, other.text
        assert other.headers[SERVED_BY] != home  # the bound is 0: one request in flight there is too many
    # the held stream is closed, so its host is free again and the conversation goes home
    wait_for(lambda: served_by(front, question, model="tight") == home, HANG, "the conversation back home")


def test_a_host_that_stops_is_failed_over_and_gets_its_conversations_back(
    front: Daemon, hosts: tuple[Daemon, Daemon]
) -> None:
    a, _ = hosts
    question = home_on(front, "a")
    before = tokens_left(front)
    spent = 0
    a.stop()
    r = ask(front, question)  # before any health check or after it: the client sees no error either way
    assert r.status_code == 200 and r.headers[SERVED_BY] == "b", r.text
    spent += r.json()["usage"]["total_tokens"]
    body = {
        "model": "smol",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"authorization": f"Bearer {CLIENT}"}
    with httpx.stream(
        "POST", front.url + "/v1/chat/completions", json=body, headers=headers, timeout=HANG
    ) as s:
        assert s.status_code == 200 and s.headers[SERVED_BY] == "b"
        events = [line.removeprefix("data: ") for line in s.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    usage = [json.loads(e)["usage"] for e in events[:-1] if json.loads(e).get("usage")]
    spent += usage[-1]["total_tokens"]
    assert tokens_left(front) == before - spent  # charged once, at the front, for what b answered
    assert gauge(front, A_UP) == 0  # its breaker is open
    a.start()
    wait_for(lambda: gauge(front, A_UP) == 1, HANG, "host a's health check answered")
    assert served_by(front, question) == "a"
