"""A model's tokenizer over HTTP, in vLLM's shapes: ``POST /tokenize``, ``POST /detokenize``, ``GET
/tokenizer_info``. Harnesses that tokenize on the server use them (lm-eval's ``remote`` tokenizer, its default for
``local-completions`` when they answer), so a benchmark needs no tokenizer download.

``model`` may be left out, as a one-model vLLM server takes it: the catalog's only model then. Each is answered
by the model's engine (llama-server's ``/tokenize``, ``/detokenize`` and ``/props``), started if it is not
running, without admission: it takes no slot. It owns these three bodies.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import orjson

from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway import prompt_logprobs, proxy
from blazar.gateway.core import llama_only
from blazar.gateway.exchange import Exchange
from blazar.gateway.http import JSON_HEADERS, HttpError, Request
from blazar.supervisor import Child, Supervisor

Response = tuple[int, list[tuple[str, str]], bytes]


def _model(sup: Supervisor, asked: Any) -> str:
    if asked is not None:
        if not isinstance(asked, str) or not asked:
            raise HttpError(400, f"'model' must be a non-empty string naming a model, got {asked!r}")
        return asked
    models = sup.catalog.list()
    if len(models) == 1:
        return models[0].name
    raise HttpError(
        400,
        f"'model' is required: this server has {len(models)} models, so name the one whose tokenizer to use"
        " (GET /v1/models lists them)",
    )


async def _on_engine(sup: Supervisor, req: Request, model: str, what: str, work: Any) -> Any:
    """``work(child)`` on ``model``'s ready engine, a llama-server (its tokenizer endpoints)."""
    canon = CanonicalRequest(model=model, kind="completion", prompt="")
    ex = Exchange.claim(sup, req, canon, remote_checked=False)  # the key's scope covers its tokenizer too

    async def run(child: Child, _load_ns: int) -> Any:
        llama_only(child, child.spec.can.token_counting, what, "/tokenize and /detokenize")
        return await work(child)

    return await ex.unadmitted(run)


async def tokenize(sup: Supervisor, req: Request, proto: Any) -> Response:
    """``{"prompt", "add_special_tokens"?, "return_token_strs"?, "model"?}`` -> ``{"count", "max_model_len",
    "tokens"[, "token_strs"]}``."""
    body = req.json_object()
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        got = "messages (chat tokenizing is not served here)" if "messages" in body else repr(prompt)
        raise HttpError(
            400, f"'prompt' is required and must be a string, got {got}; send the text to tokenize"
        )
    special, strs = body.get("add_special_tokens", True), body.get("return_token_strs", False)
    for key, value in (("add_special_tokens", special), ("return_token_strs", strs)):
        if not isinstance(value, bool):
            raise HttpError(400, f"'{key}' must be a boolean, got {value!r}")

    async def work(child: Child) -> dict[str, Any]:
        asked = {"content": prompt, "add_special": special, "with_pieces": strs}
        tokens = await proxy.ask(sup, req, child, "/tokenize", asked, "tokens", list)
        out: dict[str, Any] = {
            "count": len(tokens),
            "max_model_len": child.spec.ctx_per_slot or child.spec.ctx_size,
        }
        if strs:
            out["tokens"] = [t["id"] for t in tokens]
            # a piece that is not whole UTF-8 comes as its bytes
            out["token_strs"] = [
                t["piece"] if isinstance(t["piece"], str) else bytes(t["piece"]).decode(errors="replace")
                for t in tokens
            ]
        else:
            out["tokens"] = tokens
        return out

    out = await _on_engine(sup, req, _model(sup, body.get("model")), "tokenizing", work)
    return 200, JSON_HEADERS, orjson.dumps(out)


async def detokenize(sup: Supervisor, req: Request, proto: Any) -> Response:
    """``{"tokens", "model"?}`` -> ``{"prompt"}``."""
    body = req.json_object()
    tokens = body.get("tokens")
    if not isinstance(tokens, list):
        raise HttpError(400, f"'tokens' is required and must be an array of token ids, got {tokens!r}")

    async def work(child: Child) -> str:
        await prompt_logprobs.check_tokens(sup, child, tokens, "'tokens'")
        text: str = await proxy.ask(sup, req, child, "/detokenize", {"tokens": tokens}, "content", str)
        return text

    text = await _on_engine(sup, req, _model(sup, body.get("model")), "detokenizing", work)
    return 200, JSON_HEADERS, orjson.dumps({"prompt": text})


async def tokenizer_info(sup: Supervisor, req: Request, proto: Any) -> Response:
    """``GET /tokenizer_info[?model=]``: the special tokens and the chat template (llama-server's ``/props``)."""
    asked = parse_qs(req.query).get("model")

    async def work(child: Child) -> dict[str, Any]:
        with sup.lease(child):
            _s, data, _c = await proxy.get_whole(sup, child, "/props")
        props = orjson.loads(data)
        return {
            "bos_token": props.get("bos_token"),
            "eos_token": props.get("eos_token"),
            "pad_token": None,
            "chat_template": props.get("chat_template"),
            "model_max_length": child.spec.ctx_per_slot or child.spec.ctx_size,
        }

    info = await _on_engine(sup, req, _model(sup, asked[0] if asked else None), "tokenizer_info", work)
    return 200, JSON_HEADERS, orjson.dumps(info)
