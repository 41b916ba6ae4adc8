"""Prompt preflight: the token lower bound (checked against the real SmolLM2 tokenizer, so a prompt that fits is
never refused), the refusal and its levers, and what of a canonical request counts."""

from __future__ import annotations

import base64
import random
import subprocess
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from blazar.dialects.canonical import CanonicalRequest
from blazar.errors import BlazarError
from blazar.launch.preflight import (
    ImagesUnreadable,
    PromptTooLong,
    check_images_readable,
    check_prompt_fits,
    check_request_fits,
    estimate_tokens,
)
from tests.conftest import Assets, free_port


def chat(*texts: str, **kw: object) -> CanonicalRequest:
    return CanonicalRequest(
        model="m:latest", kind="chat", messages=[{"role": "user", "content": t} for t in texts], **kw
    )  # type: ignore[arg-type]


def test_check_prompt_fits_refuses_with_the_levers() -> None:
    check_prompt_fits(100, None, 4096)
    check_prompt_fits(4095, 100_000, 4096)  # max_tokens alone never refuses
    check_prompt_fits(10**9, None, 0)  # unknown context: no opinion
    with pytest.raises(PromptTooLong) as exc:
        check_prompt_fits(4096, 256, 4096, model="smollm2:latest")
    e = exc.value
    assert isinstance(e, BlazarError) and e.status == 400
    text = str(e)
    assert "at least 4096 tokens plus max_tokens 256" in text and "a slot holds 4096 tokens" in text
    for lever in (
        "ctx_size",
        "parallel",
        "cache_type_k/cache_type_v",
        '"q8_0"',
        "gpu_layers",
        "smollm2:latest",
    ):
        assert lever in text, text


def test_estimate_counts_every_part_of_a_request() -> None:
    assert estimate_tokens(chat("abcdefgh" * 100)) == 50
    parts = {
        "role": "user",
        "content": [{"type": "text", "text": "abcd" * 20}, {"type": "image_url", "image_url": {}}],
    }
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"function": {"name": "f", "arguments": "wxyz" * 20}}],
    }
    req = CanonicalRequest(model="m", kind="chat", messages=[parts, call])
    assert estimate_tokens(req) == 10  # 161 bytes
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"description": "desc " * 80}}}]
    assert estimate_tokens(chat("", tools=tools)) >= 25
    infill = CanonicalRequest(model="m", kind="completion", prompt="pq" * 40, suffix="st" * 40)
    assert estimate_tokens(infill) == 10
    assert estimate_tokens(CanonicalRequest(model="m", kind="completion", prompt=[1, 2, 3])) == 3
    emb = CanonicalRequest(model="m", kind="embedding", input=["ab" * 40, "cd" * 400, [5, 6]])
    assert estimate_tokens(emb) == 50  # the longest single input
    assert estimate_tokens(CanonicalRequest(model="m", kind="embedding", input="cd" * 8)) == 1


def test_runs_of_one_character_count_little() -> None:
    assert estimate_tokens(chat(" " * 6400)) == 50
    assert estimate_tokens(chat("=" * 640 + "ab" * 40)) == 10


def test_images_for_a_model_that_cannot_read_them_are_refused() -> None:
    picture = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    seeing = CanonicalRequest(model="m:latest", kind="chat", messages=[{"role": "user", "content": picture}])
    check_images_readable(seeing, reads_images=True)
    check_images_readable(chat("no picture here"), reads_images=False)
    with pytest.raises(ImagesUnreadable) as exc:
        check_images_readable(seeing, reads_images=False)
    assert exc.value.status == 400 and str(exc.value).startswith(
        "model 'm:latest' cannot read images: it runs without a vision projector (mmproj)"
    )


def test_check_request_fits() -> None:
    check_request_fits(chat("word " * 1000), 4096)
    with pytest.raises(PromptTooLong, match="model 'm:latest'"):
        check_request_fits(chat("word " * 16000, params={"max_tokens": 10}), 4096)
    check_request_fits(chat("word " * 16000), 0)


# --- the lower bound against the real tokenizer ------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenize(assets: Assets) -> Iterator[object]:
    port = free_port()
    argv = [str(assets.llama_server), "-m", str(assets.model), "--port", str(port), "-c", "512", "--no-webui"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, "llama-server exited"
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)

        def count(text: str) -> int:
            r = httpx.post(url + "/tokenize", json={"content": text}, timeout=30)
            return len(r.json()["tokens"])

        yield count
    finally:
        proc.kill()
        proc.wait()


def _samples() -> dict[str, str]:
    rng = random.Random(7)
    code = "\n".join(
        " " * (4 * (i % 5)) + f"if value_{i} is not None:  # check {i}\n" + " " * 12 + "return value"
        for i in range(60)
    )
    return {
        "prose": "The quick brown fox jumps over the lazy dog, again and again. " * 40,
        "code": code,
        "json": str([{"id": i, "name": f"item-{i}", "tags": ["a", "b"]} for i in range(60)]),
        "cjk": "機械学習は人工知能の一分野である。我们今天去公园散步。" * 30,
        "emoji": "🔥🚀✨ ok " * 100,
        "digits": "".join(str(rng.randrange(10)) for _ in range(2000)),
        "base64": base64.b64encode(rng.randbytes(1500)).decode(),
        "spaces": "a" + " " * 3000 + "b",
        "rules": ("=" * 80 + "\n") * 30,
        "repeated": "the " * 800,
        "long words": " information" * 600,  # one whole-word token of 12 bytes each time
        "long mixed words": " internationalization responsibilities characteristically" * 120,
    }


@pytest.mark.parametrize("kind", list(_samples()))
def test_estimate_is_a_lower_bound(tokenize: object, kind: str) -> None:
    assert callable(tokenize)
    text = _samples()[kind]
    real = tokenize(text)
    assert estimate_tokens(chat(text)) <= real, (kind, real)


def test_small_bodies_skip_the_measurement_and_never_change_the_answer() -> None:
    """The body-size shortcut is sound: across dialects' bodies (ASCII, CJK, emoji, escapes, tools, token ids)
    the estimate never exceeds what the shortcut assumes, so skipping cannot pass a prompt that would be refused."""
    from blazar.dialects import anthropic as anthropic_dialect
    from blazar.dialects import openai as openai_dialect
    from blazar.launch.preflight import BYTES_PER_TOKEN_MAX, TOOL_WRAP_BYTES

    rng = random.Random(7)
    alphabet = 'ab \n\t"\\é漢字😀\u0001' + "=" * 4
    tool = {"name": "get_weather", "description": "d", "input_schema": {"type": "object", "properties": {}}}
    for i in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        if i % 2:
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": text}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            }
            canon = openai_dialect.parse_chat(body)
        else:
            body = {
                "model": "m",
                "max_tokens": 5,
                "system": text,
                "tools": [tool],
                "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
            }
            canon = anthropic_dialect.parse_messages(body)
        raw = orjson.dumps(body)
        budget = len(raw) + TOOL_WRAP_BYTES * len(canon.tools or ())
        assert estimate_tokens(canon) * BYTES_PER_TOKEN_MAX <= budget, (i, text)
    ids = CanonicalRequest(model="m:latest", kind="completion", prompt=list(range(1000)))
    assert estimate_tokens(ids) * 2 <= len(orjson.dumps({"prompt": list(range(1000))}))


def test_check_request_fits_with_the_body_size() -> None:
    big = chat("word " * 16000)
    check_request_fits(big, 4096, body_len=100)  # a 100-byte body cannot hold 4096 tokens: not measured
    with pytest.raises(PromptTooLong):
        check_request_fits(big, 4096, body_len=80_100)
    ids = CanonicalRequest(model="m:latest", kind="completion", prompt=list(range(5000)))  # type: ignore[arg-type]
    with pytest.raises(PromptTooLong):
        check_request_fits(ids, 4096, body_len=20_000)  # token ids are measured from 2 bytes per token
