"""Ollama's catalog and status endpoints: /, /api/version, /api/tags, /api/ps, /api/show, /api/copy, /api/delete.

They read the catalog and the supervisor; they never talk to an engine. Errors use Ollama's shape
``{"error": "..."}``. ``digest`` in /api/tags and /api/ps entries is the catalog's hex sha256 of the weights, as
Ollama's; /api/show has no digest field in Ollama's API, so it rides in the generated modelfile. A row without a
digest yet (an older database) is hashed on first use by ``Catalog.digest``, in a worker thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from blazar import __version__
from blazar.catalog import ggml_whisper, names, presets
from blazar.catalog.gguf_info import human_params
from blazar.catalog.loras import LoraRow
from blazar.catalog.model_dir import chat_template, read_config, small_config
from blazar.catalog.models import ModelRow, read_header
from blazar.dialects.canonical import shown
from blazar.gateway import remote
from blazar.gateway.http import JSON_HEADERS, HttpError, Request
from blazar.gateway.tenancy import require_visible, visible
from blazar.launch.settings import model_capabilities
from blazar.paths import TOKENS_SUFFIX, child_keys, replica_of
from blazar.supervisor import State, Supervisor, sleep
from blazar.supervisor.remotes import LISTING

_ENGINE_USE = {"": "chat", "@embed": "embeddings", TOKENS_SUFFIX: "late_chunking"}
"""Blazar's own ``engine`` field of an ``/api/ps`` entry, from its child key's suffix."""

Response = tuple[int, list[tuple[str, str]], bytes]

OLLAMA_COMPAT_VERSION = "0.12.0"
"""The Ollama API version whose endpoints and fields Blazar serves; some clients gate features on it."""

_FOREVER_SECS = 10 * 365 * 86400
"""How far ahead /api/ps puts ``expires_at`` for a model kept loaded forever (and the latest it ever shows)."""


def _json(obj: Any, status: int = 200) -> Response:
    return status, JSON_HEADERS, orjson.dumps(obj)


def _details(m: ModelRow) -> dict[str, Any]:
    family = m.architecture or ""
    return {
        "parent_model": "",
        "format": m.format,
        "family": family,
        "families": [family] if family else None,
        "parameter_size": human_params(m.parameter_count or 0),
        "quantization_level": m.quantization or "",
    }


def _entry(m: ModelRow, digest: str | None) -> dict[str, Any]:
    return {
        "name": m.name,
        "model": m.name,
        "modified_at": m.created_at,
        "size": m.size_bytes,
        "digest": digest or "",
        "details": _details(m),
    }


async def root(sup: Supervisor, req: Request, proto: Any) -> Response:
    return 200, [("content-type", "text/plain; charset=utf-8")], b"Blazar is running"


async def version(sup: Supervisor, req: Request, proto: Any) -> Response:
    # "version" is the Ollama API Blazar serves, which clients gate features on; "blazar" is the package's own
    return _json({"version": OLLAMA_COMPAT_VERSION, "blazar": __version__})


def _adapter_entry(a: LoraRow, base: ModelRow | None) -> dict[str, Any]:
    """A LoRA adapter as Ollama lists a model made with ``ADAPTER``: its base's details, the base as parent."""
    details = _details(base) if base is not None else {"format": "gguf"}
    return {
        "name": a.name,
        "model": a.name,
        "modified_at": a.created_at,
        "size": a.size_bytes + (base.size_bytes if base is not None else 0),
        "digest": a.sha256,
        "details": {**details, "parent_model": a.base},
    }


async def tags(sup: Supervisor, req: Request, proto: Any) -> Response:
    # One at a time: an older catalog's first listing hashes its files in turn, not all at once on the disk.
    models = [m for m in sup.catalog.list() if visible(req, m.name)]
    out = [_entry(m, await sup.catalog.digest(m)) for m in models]
    by_name = {m.name: m for m in models}
    out += [
        _adapter_entry(a, by_name.get(a.base) or sup.catalog.find(a.base))
        for a in sup.loras.list()
        if visible(req, a.name)
    ]
    out.sort(key=lambda e: e["name"])
    if sup.remotes.by_name and not req.headers.get(LISTING):
        out += [_remote_entry(m["id"]) for m in await remote.listed(sup, req)]
    return _json({"models": out})


def _remote_entry(name: str) -> dict[str, Any]:
    """A remote's model in Ollama's list: its name; what the remote does not say (size, digest) is empty."""
    details = {"parent_model": "", "format": "remote", "family": "", "families": None, "parameter_size": "",
               "quantization_level": ""}  # fmt: skip
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return {"name": name, "model": name, "modified_at": now, "size": 0, "digest": "", "details": details}


async def ps(sup: Supervisor, req: Request, proto: Any) -> Response:
    out = []
    now_mono = time.monotonic()
    now_wall = time.time()
    queues = req.gate.admission.stats()
    for child in list(sup.children.values()):
        if child.state is not State.READY or not child.alive():  # an engine that died is not loaded
            continue
        m = sup.catalog.find(child.model)
        if m is None:
            continue
        # every name this engine answers for (copies over the same weights file, the model's LoRA adapters), as
        # far as the caller may see them: a scoped key sees the engine of its own model, under its own name
        names = [m.name, *sup.sharing.sharers(m.name), *(a.name for a in sup.loras.for_base(m.name))]
        names = [n for n in names if visible(req, n)]
        if not names:
            continue
        shown = m if names[0] == m.name else (sup.catalog.find(names[0]) or m)
        digest = await sup.catalog.digest(m)
        limit = child.keep.limit(float(sup.cfg.idle_timeout_secs))
        if limit is None:
            remaining = float(_FOREVER_SECS)
        else:  # a keep_alive past the horizon (1e308 seconds is a valid JSON number) would overflow the calendar
            left = limit if child.inflight > 0 else max(0.0, limit - (now_mono - child.last_used))
            remaining = min(left, _FOREVER_SECS)
        expires = datetime.fromtimestamp(now_wall + remaining, UTC)
        base, replica = replica_of(child.key)
        queue = queues.get(base)  # a model's replicas share one admission queue
        out.append(
            {
                **_entry(shown, digest),
                # the name any endpoint takes back (an unload stops all of the model's engines); Blazar's own
                # "engine" field says which one this is
                "name": names[0],
                "model": names[0],
                "engine": _ENGINE_USE.get(base[len(m.name) :], "chat"),
                # Blazar's own: which of the model's engine instances this is (replicas = N: 0 to N-1), and the
                # requests on it now
                "replica": replica,
                "in_flight": child.inflight,
                # Blazar's own: the names (that the caller may see) this engine answers for, each of which unloads it
                "names": names,
                "expires_at": expires.isoformat().replace("+00:00", "Z"),
                "size_vram": 0,
                # as Ollama's: what one request can use (its num_ctx), not the engine's total over its slots
                "context_length": child.spec.ctx_per_slot or child.spec.ctx_size,
                # Blazar's own: the engine freed its model while idle (idle_sleep_secs); the next request
                # reloads it
                "asleep": await sleep.asleep(child),
                # Blazar's own: the share of prompt tokens its prompt cache saved, and of speculative draft
                # tokens accepted (hints.py; null until measured)
                "cache_hint": child.hints.cache_hint,
                "spec_accept": child.hints.spec_accept,
                # Blazar's own: its admission queue now, the slots its requests hold and the requests waiting
                # for one
                "busy_slots": queue.running if queue else 0,
                "queued": queue.waiting if queue else 0,
                # Blazar's own: the engine's slots, and whether they share one context (parallel = "auto")
                "slots": child.spec.parallel,
                "shared_context": child.spec.kv_unified,
            }
        )
    return _json({"models": out})


def _model_name(body: dict[str, Any]) -> str:
    v = body.get("model", body.get("name"))
    if not isinstance(v, str) or not v:
        raise HttpError(400, "'model' is required and must be a non-empty string")
    return names.check(v)  # taken as given: a space or control character is a 400 naming it


def _modelfile(m: ModelRow, digest: str | None, preset: Mapping[str, Any]) -> str:
    """Ollama's names the weights by their blob's path on the server; ours names the model, so that the text,
    sent back as ``/api/create``'s ``modelfile``, makes a model like it (and no server path is shown), and gives
    the digest in a comment."""
    lines = ["# Modelfile generated by blazar"]
    if digest:
        lines.append(f"# digest sha256:{digest}")
    return "\n".join([*lines, f"FROM {m.name}", *presets.modelfile_lines(preset), ""])


VERBOSE_ARRAY_LEN = 1 << 24
"""The longest metadata array a verbose ``/api/show`` builds (a tokenizer's vocabulary and merges have some
100,000 to a few million items; a GGUF's own header bounds what it can declare)."""


async def show(sup: Supervisor, req: Request, proto: Any) -> Response:
    body = req.json_object()
    name = _model_name(body)
    verbose = body.get("verbose")
    if verbose is not None and not isinstance(verbose, bool):
        raise HttpError(400, f"verbose must be a boolean, got {shown(verbose)}")
    require_visible(req, name)
    if sup.remote_for(name) is not None:
        raise remote.not_here(name, "/api/show (the model's file and template)")
    adapter = sup.loras.find(name) if sup.catalog.find(name) is None else None
    m = sup.catalog.get(name if adapter is None else adapter.base)
    digest = await sup.catalog.digest(m)
    tensors: object = None
    if m.path.is_dir():  # safetensors / MLX: what config.json and the tokenizer files say
        md: dict[str, Any] = {}
        model_info: dict[str, object] = dict(small_config(read_config(m.path)))
        model_info["general.architecture"] = m.architecture
        model_info["general.parameter_count"] = m.parameter_count
        template: object = chat_template(m.path)
    elif m.format == "whisper":  # a whisper.cpp model: its ggml header
        info = ggml_whisper.read(m.path)
        md, template = {}, ""
        model_info = {"general.architecture": "whisper", **(info.metadata() if info is not None else {})}
    else:
        # as Ollama's: the tokenizer's long arrays (vocabulary, merges, token types) and the tensor list come
        # with verbose only; without it such an array is shown empty
        header = read_header(
            m.path, max_array_len=VERBOSE_ARRAY_LEN if verbose else 1024, tensors=bool(verbose)
        )
        meta = header.get("metadata")
        md = dict(meta) if isinstance(meta, dict) else {}
        template = md.pop("tokenizer.chat_template", "")
        model_info = {k: (v if isinstance(v, str | int | float | bool | list) else []) for k, v in md.items()}
        model_info["general.parameter_count"] = header.get("parameter_count")
        tensors = header.get("tensors")
    # the template its engine is started with, when config.toml sets one
    template = sup.cfg.model_override(m.name).template_text() or template
    ctx = _request_ctx(sup, m)
    preset = (m.preset or {}) if adapter is None else {}  # an adapter is served without its base's preset
    own = presets.show_parameters(preset)
    params = [own] if own else []
    if "num_ctx" not in preset.get("parameters", {}):
        params.insert(0, f"num_ctx {ctx}")
    caps = await asyncio.to_thread(
        model_capabilities, sup.cfg, m
    )  # a changed file: its vocabulary read, once
    modelfile, details = _modelfile(m, digest, preset), _details(m)
    if adapter is not None:  # as Ollama shows a model made with ADAPTER
        modelfile += f"ADAPTER @sha256:{adapter.sha256}\n"
        details["parent_model"] = adapter.base
    licence = "\n".join(preset["license"]) if preset.get("license") else md.get("general.license", "")
    extra = {"tensors": tensors} if tensors is not None else {}
    return _json(
        {
            "license": licence,
            "system": preset.get("system", ""),
            "messages": preset.get("messages", []),
            "modelfile": modelfile,
            "parameters": "\n".join(params),
            "template": template if isinstance(template, str) else "",
            "details": details,
            "model_info": model_info,
            "capabilities": caps,
            "modified_at": m.created_at,
            **extra,
        }
    )


def _request_ctx(sup: Supervisor, m: ModelRow) -> int:
    """The context one request to ``m`` gets (Ollama's ``num_ctx``): its running engine's per slot, else its
    placement's (the config's ``ctx_size``, or the model's trained context, over its KV streams)."""
    placed = sup.placements.place(m.name)
    child = sup.children.get(placed.key)
    if child is not None and child.spec.ctx_per_slot > 0:
        return child.spec.ctx_per_slot
    return max(placed.ctx_per_slot, 1)


async def push(sup: Supervisor, req: Request, proto: Any) -> Response:
    """Ollama's ``/api/push``: there is no registry here to push to, so it is refused (501), with how to move a
    model instead; a 404 would read as "no such model" to clients."""
    raise HttpError(
        501,
        "blazar has no model registry to push to, so /api/push is not supported; a model here is a GGUF file:"
        " copy it to the other machine and add it there with blazar import FILE --name NAME, or publish it on"
        " the Hugging Face Hub, from where /api/pull and blazar pull fetch it",
    )


async def copy(sup: Supervisor, req: Request, proto: Any) -> Response:
    req.require_full_access("copying models")
    body = req.json_object()
    src, dst = body.get("source"), body.get("destination")
    if not isinstance(src, str) or not isinstance(dst, str) or not src or not dst:
        raise HttpError(400, "'source' and 'destination' are required strings")
    source, old = sup.catalog.get(src), sup.catalog.find(names.normalize(dst))
    if old is not None and old.name == source.name:  # onto itself: nothing to do
        return 200, [], b""
    if old is not None:  # Ollama overwrites the destination; here it is replaced in one step
        await stop_engines(sup, old.name, old, "replaced by /api/copy")
    sup.catalog.copy(source.name, dst, replace=old is not None)
    return 200, [], b""


async def delete(sup: Supervisor, req: Request, proto: Any) -> Response:
    req.require_full_access("deleting models")
    body = req.json_object()
    name = names.normalize(_model_name(body))
    row = sup.catalog.find(name)
    if row is None and sup.loras.find(name) is not None:
        sup.remove_lora(name)
        return 200, [], b""
    await remove_model(sup, name, row, "model deleted")
    for key in child_keys(name):  # its sessions' slots are gone too
        req.gate.sessions.release_model(key)
    return 200, [], b""


async def remove_model(sup: Supervisor, name: str, row: ModelRow | None, reason: str) -> None:
    """Remove catalog model ``name`` (``row``, when found) and stop its engines (``reason``); a model with LoRA
    adapters is refused before its engines stop, so a refused removal leaves them serving."""
    await stop_engines(sup, name, row, reason)
    sup.catalog.remove(name)


async def stop_engines(sup: Supervisor, name: str, row: ModelRow | None, reason: str) -> None:
    """Stop the engines of catalog model ``name`` before it is removed or replaced (``reason``); a model with
    LoRA adapters is refused first (they are served on it), so its engines keep serving. An engine that other names
    share is taken out of service and stopped once its requests finish: theirs are never cut, and theirs that
    follow start the engine of their new owner."""
    if row is not None:
        sup.catalog.check_removable(row)
    shared = bool(sup.sharing.sharers(name))  # other names run on its engine: their answers must not be cut
    for key in [k for k, c in sup.children.items() if c.model == name]:
        if shared:
            await sup.retire_when_idle(key, reason)
        else:
            await sup.evict(key, reason, gone=True)
