"""End to end: a completion's ``echo`` with ``logprobs`` scores its prompt, token by token, on a real llama-server,
and lm-eval (its ``local-completions`` model, unchanged) runs a multiple-choice task on it.

The engine serves an F32 copy of SmolLM2 (``llama-quantize`` from the test model: the same dequantized weights)
with an F32 KV cache and no flash attention, and every prompt token's logprob must equal, within 1e-3, what
``tests.oracle.llama`` computes from that file's weights in float64 numpy, which shares no code with the engine.
The tasks (``lm_eval/``: six questions, four choices each, scored by loglikelihood and by a generated answer)
ship with the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import HANG, Assets, Daemon, cleanup, make_daemon
from tests.oracle.llama import TOLERANCE, Llama, exact_engine, f32_copy

pytestmark = pytest.mark.e2e

MODEL = "smolf32"
CONFIG = exact_engine(MODEL)
TEXT = "The capital of France is Paris. It is known for the Eiffel Tower"
TASK = Path(__file__).parent / "lm_eval"


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory: pytest.TempPathFactory, assets: Assets) -> Path:
    out = tmp_path_factory.mktemp("f32") / "smollm2-f32.gguf"
    return f32_copy(assets.llama_server.parent / "llama-quantize", assets.model, out)


@pytest.fixture(scope="module")
def oracle(f32_model: Path) -> Llama:
    return Llama(f32_model)


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory, assets: Assets, f32_model: Path) -> Iterator[Daemon]:
    daemon = make_daemon(tmp_path_factory.mktemp("echo"), CONFIG)
    daemon.cli("engine", "add", "--kind", "llama-cpp", "--path", str(assets.llama_server))
    daemon.cli("import", str(f32_model), "--name", MODEL)
    daemon.start()
    yield daemon
    cleanup(daemon)


def complete(d: Daemon, **body: Any) -> httpx.Response:
    return httpx.post(d.url + "/v1/completions", json={"model": MODEL, **body}, timeout=HANG)


def tokenize(d: Daemon, text: str, special: bool = True) -> list[int]:
    body = {"model": MODEL, "prompt": text, "add_special_tokens": special}
    r = httpx.post(d.url + "/tokenize", json=body, timeout=HANG)
    assert r.status_code == 200, r.text
    tokens: list[int] = r.json()["tokens"]
    return tokens


def assert_scores_match(logprobs: dict[str, Any], want: list[tuple[float, dict[int, float]]], k: int) -> None:
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    for got, top, (expected, alternatives) in zip(
        logprobs["token_logprobs"][1:], logprobs["top_logprobs"][1:], want, strict=True
    ):
        assert abs(got - expected) < TOLERANCE, (got, expected)
        best = sorted(alternatives.values(), reverse=True)[:k]
        assert len(top) == k
        assert sorted(top.values(), reverse=True) == pytest.approx(best, abs=TOLERANCE)


def test_a_string_prompt_is_scored_as_the_reference_computes(d: Daemon, oracle: Llama) -> None:
    r = complete(d, prompt=TEXT, echo=True, logprobs=2, max_tokens=0)
    assert r.status_code == 200, r.text
    body = r.json()
    (choice,) = body["choices"]
    assert body["object"] == "text_completion" and body["model"] == MODEL
    assert choice["text"] == TEXT and choice["index"] == 0
    lp = choice["logprobs"]
    assert "".join(lp["tokens"]) == TEXT
    assert lp["text_offset"] == [len("".join(lp["tokens"][:i])) for i in range(len(lp["tokens"]))]
    tokens = tokenize(d, TEXT)
    assert lp["tokens"] == [
        httpx.post(d.url + "/detokenize", json={"tokens": [t]}, timeout=HANG).json()["prompt"] for t in tokens
    ]
    assert body["usage"] == {
        "prompt_tokens": len(tokens),
        "completion_tokens": 0,
        "total_tokens": len(tokens),
    }
    assert_scores_match(lp, oracle.scores(tokens), 2)


def test_batched_token_prompts_are_scored_alone_and_then_continued(d: Daemon, oracle: Llama) -> None:
    first, second = tokenize(d, "Water boils at one hundred"), tokenize(d, "The quick brown fox jumps over")
    r = complete(d, prompt=[first, second], echo=True, logprobs=1, max_tokens=3, temperature=0)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    generated = 0
    for choice, tokens in zip(body["choices"], (first, second), strict=True):
        lp = choice["logprobs"]
        plain = complete(d, prompt=tokens, max_tokens=3, temperature=0, logprobs=1).json()["choices"][0]
        prompt_text = choice["text"][: len(choice["text"]) - len(plain["text"])]
        assert (
            choice["text"] == prompt_text + plain["text"]
            and choice["finish_reason"] == plain["finish_reason"]
        )
        n = len(tokens)
        # the prompt's part, then the continuation's, its offsets moved past the prompt
        assert_scores_match({k: v[:n] for k, v in lp.items()}, oracle.scores(tokens), 1)
        assert lp["tokens"][n:] == plain["logprobs"]["tokens"]
        assert lp["token_logprobs"][n:] == pytest.approx(plain["logprobs"]["token_logprobs"], abs=TOLERANCE)
        assert lp["text_offset"][n:] == [len(prompt_text) + o for o in plain["logprobs"]["text_offset"]]
        # lm-eval's greedy check: each token's logprob is its top entry's
        assert lp["token_logprobs"][-1] == max(lp["top_logprobs"][-1].values())
        generated += len(plain["logprobs"]["tokens"])
    assert body["usage"]["prompt_tokens"] == len(first) + len(second)
    assert body["usage"]["completion_tokens"] == generated


def test_echo_without_logprobs_repeats_the_prompt_before_the_answer(d: Daemon) -> None:
    r = complete(d, prompt=TEXT, echo=True, max_tokens=4, temperature=0)
    assert r.status_code == 200, r.text
    plain = complete(d, prompt=TEXT, max_tokens=4, temperature=0).json()["choices"][0]["text"]
    (choice,) = r.json()["choices"]
    assert choice["text"] == TEXT + plain and choice["logprobs"] is None


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"prompt": TEXT, "echo": True, "stream": True}, "'echo' is answered whole"),
        ({"prompt": [[1, 2], []], "echo": True}, "with 'echo', 'prompt' must be"),
        (
            {"prompt": [99999999], "echo": True, "logprobs": 1, "max_tokens": 0},
            "prompt 0 holds 99999999, which is not a token id of model 'smolf32:latest' (its ids run from 0 to 49151)",
        ),
    ],
)
def test_echo_refusals_are_the_callers_400(d: Daemon, body: dict[str, Any], needle: str) -> None:
    r = complete(d, **body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error" and needle in r.json()["error"]["message"]


def test_lm_eval_runs_a_multiple_choice_and_a_generation_task(
    d: Daemon, oracle: Llama, tmp_path: Path
) -> None:
    url = d.url + "/v1/completions"
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),  # the task's data is a local file: nothing is fetched
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    run = subprocess.run(
        [
            *(sys.executable, "-m", "lm_eval", "run", "--model", "local-completions"),
            *("--model_args", f"model={MODEL},base_url={url},num_concurrent=1,max_retries=1"),
            *("--tasks", "blazar_capitals,blazar_capitals_gen", "--include_path", str(TASK)),
            *("--output_path", str(tmp_path / "out"), "--log_samples"),
        ],
        cwd=TASK,  # the task names its data file relative to it
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert "Using remote tokenizer" in run.stderr  # Blazar's /tokenizer_info and /tokenize, detected
    (results,) = (tmp_path / "out").glob("*/results_*.json")
    scored = json.loads(results.read_text())["results"]
    acc = scored["blazar_capitals"]["acc,none"]
    assert 0 <= scored["blazar_capitals_gen"]["exact_match,none"] <= 1
    (samples,) = (tmp_path / "out").glob("*/samples_blazar_capitals_2*.jsonl")  # the date follows the name
    docs = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(docs) == 6
    right = 0
    for doc in docs:
        lls = []
        for n, (arg, resp) in enumerate(zip(doc["arguments"].values(), doc["resps"], strict=True)):
            context, continuation = arg["arg_0"], arg["arg_1"]
            whole, head = tokenize(d, context + continuation, False), tokenize(d, context, False)
            scores = oracle.scores(whole)
            want = sum(scores[i - 1][0] for i in range(len(head), len(whole)))
            got = float(resp[0][0])
            assert abs(got - want) < TOLERANCE * (len(whole) - len(head)), (doc["doc_id"], n, got, want)
            lls.append(want)
        right += int(max(range(len(lls)), key=lls.__getitem__) == int(doc["target"]))
    assert acc == pytest.approx(right / len(docs))
    # the generation task: each answer is the server's own greedy completion of the question, stop words cut
    (gen,) = (tmp_path / "out").glob("*/samples_blazar_capitals_gen_*.jsonl")
    for doc in (json.loads(line) for line in gen.read_text().splitlines()):
        context = doc["arguments"]["gen_args_0"]["arg_0"]
        r = complete(d, prompt=context, max_tokens=8, temperature=0, stop=["\n", "."])
        assert r.status_code == 200, r.text
        assert doc["resps"] == [[r.json()["choices"][0]["text"]]], doc


def test_the_tokenizer_routes_answer_in_vllms_shapes(d: Daemon) -> None:
    r = httpx.post(d.url + "/tokenize", json={"prompt": TEXT, "return_token_strs": True}, timeout=HANG)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (
        body["count"] == len(body["tokens"]) == len(body["token_strs"])
        and "".join(body["token_strs"]) == TEXT
    )
    assert body["max_model_len"] == 4096  # the slot's context: the model's 4096, one slot
    back = httpx.post(d.url + "/detokenize", json={"tokens": body["tokens"]}, timeout=HANG)
    assert back.status_code == 200 and back.json() == {"prompt": TEXT}
    info = httpx.get(d.url + "/tokenizer_info", timeout=HANG).json()
    assert info["eos_token"] == "<|im_end|>" and "<|im_start|>" in info["chat_template"]
    named = httpx.get(d.url + "/tokenizer_info", params={"model": MODEL}, timeout=HANG).json()
    assert named == info
    for path, body, needle in (
        ("/tokenize", {"messages": []}, "'prompt' is required and must be a string, got messages"),
        ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, "'add_special_tokens' must be a boolean"),
        ("/detokenize", {"tokens": [1, -1]}, "holds -1, which is not a token id of model"),
        ("/detokenize", {"tokens": "1"}, "'tokens' is required and must be an array of token ids"),
    ):
        r = httpx.post(d.url + path, json=body, timeout=HANG)
        assert r.status_code == 400 and needle in r.json()["error"]["message"], (path, r.text)


def test_without_a_model_the_tokenizer_needs_one_when_there_are_several(daemon_factory: Any) -> None:
    two = daemon_factory(start=False)
    two.cli("cp", "smollm2", "other")
    two.start()
    r = httpx.post(two.url + "/tokenize", json={"prompt": "x"}, timeout=HANG)
    assert r.status_code == 400, r.text
    assert "'model' is required: this server has 2 models" in r.json()["error"]["message"]
    r = httpx.post(two.url + "/tokenize", json={"prompt": "x", "model": "smollm2"}, timeout=HANG)
    assert r.status_code == 200 and r.json()["count"] == 1, r.text
