"""Ollama's ``POST /api/create``: a new catalog model made from another (``from``, quantized with ``quantize`` or
not) or from an uploaded GGUF blob (``files``; ``adapters`` makes a LoRA adapter over ``from``), with a preset of
its own (``presets``: a Modelfile's ``SYSTEM``, ``PARAMETER``, ``MESSAGE`` and ``LICENSE``).

Blazar takes the request shape of Ollama's current API, what ``ollama create -f Modelfile`` sends: ``model`` (the
new name), ``from``, ``files``, ``adapters``, ``quantize`` (a type for ``llama-quantize``, any case), ``system``,
``parameters``, ``messages``, ``license`` and ``stream``; plus ``allow_requantize`` to quantize a model that is
quantized already (Ollama refuses those). A model made from another keeps its source's preset, each field given
replacing that field (parameters one by one). Options that are set when an engine starts (``num_gpu``,
``num_thread``, ...) cannot be a preset's: they are left out and named in ``x-blazar-ignored``. Older clients'
``modelfile`` (the Modelfile's text) is read into those fields (``blazar.catalog.modelfile``). Go templates
(``template``, ``TEMPLATE``) and a Modelfile on the server's disk (``path``) are refused with a 400 that says
what to do instead: nothing is silently dropped. A name that exists is made again, as Ollama overwrites it (``_made``; a quantized one is
replaced once its new weights are made). The stream is Ollama's: ``quantizing F16 model to Q4_K_M`` (with
``total``/``completed`` tensors), ``writing manifest``, ``success``; a failure after it started is a last
``{"error": ...}`` line, and a client that leaves stops the tool and leaves nothing. The work is
``blazar.catalog.quantize``'s, the catalog's and ``gateway.blobs``'; this module only speaks HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from blazar.catalog import ggml_whisper, modelfile, names, presets, quantize
from blazar.catalog.models import ModelRow, read_header
from blazar.errors import BlazarError
from blazar.gateway import blobs, ollama_admin, proxy, routing
from blazar.gateway.http import JSON_HEADERS, HttpError, Request
from blazar.gateway.pull import stream_events
from blazar.hub.pull import Event
from blazar.supervisor import Supervisor

Response = tuple[int, list[tuple[str, str]], bytes]

_NOT_TAKEN = {
    "template": (
        "Blazar applies the model's own chat template (the GGUF's Jinja template; chat_template_file under"
        ' [models."NAME"] in config.toml replaces it), not Go templates: drop TEMPLATE from the Modelfile'
    ),
    "path": "send the Modelfile's fields as JSON (model, from, system, parameters, messages), as ollama create does",
}
"""Ollama's create fields that need Go templates or a Modelfile on the server's disk, which Blazar does not build
from, and what to do instead."""


_TAKEN = {"model", "name", "from", "files", "adapters", "quantize", "quantization", "allow_requantize", "stream",
          "modelfile", *presets.FIELDS}  # fmt: skip
"""The create fields Blazar reads; any other is named in ``x-blazar-ignored``."""
_UNTAKEN = {
    "renderer": "renderer: Blazar renders prompts with the model's own chat template",
    "parser": "parser: tool calls and thinking are parsed by the engine from the model's own template",
    "insecure": "insecure: Blazar pulls nothing for a create",
}


def _string(body: dict[str, Any], field: str, what: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:  # taken as given: a space in a name is refused naming it
        raise HttpError(400, f"'{field}' is required: {what}")
    return value


async def create(sup: Supervisor, req: Request, proto: Any) -> Response | None:
    req.require_full_access("creating models")
    body = {k: v for k, v in req.json_object().items() if v is not None}  # a null field is its default
    if not body.get("model") and "name" in body:  # the older field names
        body["model"] = body["name"]
    if "quantize" not in body and "quantization" in body:
        body["quantize"] = body["quantization"]
    name = _string(body, "model", "the new model's name[:tag]")
    text = body.pop("modelfile", None)
    if text not in (None, ""):  # older clients send the Modelfile itself; JSON fields sent beside it win
        if not isinstance(text, str):
            raise HttpError(400, "'modelfile' must be the Modelfile's text, a string")
        try:
            for field, value in modelfile.parse(text).items():
                body.setdefault(field, value)
        except modelfile.ModelfileError as e:
            raise HttpError(400, f"modelfile: {e}") from None
    given = [f for f in _NOT_TAKEN if body.get(f) not in (None, "", [], {})]
    if given:
        raise HttpError(
            400,
            "Blazar's /api/create makes a model from a catalog model or an uploaded GGUF blob ('from' or"
            f" 'files', 'adapters', 'quantize', 'system', 'parameters', 'messages', 'license'); '{given[0]}' is"
            f" not supported: {_NOT_TAKEN[given[0]]}",
        )
    files, adapters = body.get("files") or None, body.get("adapters") or None  # empty: not given
    if files is not None and body.get("from") not in (None, ""):
        raise HttpError(400, "'files' and 'from' name two sources for the new model; send one of them")
    source = (
        ""
        if files is not None
        else _string(
            body, "from", "the catalog model to create the new one from (or 'files': an uploaded GGUF)"
        )
    )
    try:
        fields, ignored = presets.check({k: body[k] for k in presets.FIELDS if k in body})
    except presets.PresetError as e:
        raise HttpError(400, str(e)) from None
    ignored += [
        _UNTAKEN.get(k, f"{k} is not an /api/create field Blazar knows") for k in body if k not in _TAKEN
    ]
    if ignored:
        routing.note_ignored(req, " | ".join(ignored))
    qtype = body.get("quantize")
    if qtype is not None and not isinstance(qtype, str):
        raise HttpError(
            400, f"'quantize' must be a string such as \"q4_K_M\": one of {', '.join(quantize.TYPES)}"
        )
    if not isinstance(body.get("stream", True), bool):
        raise HttpError(400, "'stream' must be true or false")
    allow = body.get("allow_requantize", False)
    if not isinstance(allow, bool):
        raise HttpError(400, "'allow_requantize' must be true or false")
    quantized = qtype is not None and qtype.strip() != ""
    if files is not None or adapters is not None:
        events = _copied(await _from_blob(sup, name, files, adapters, source, fields, quantized))
    else:
        src = _source(sup, source, fields)
        preset = presets.merge(src.preset, fields) if fields else None
        if not quantized:
            events = _copied((await _made(sup, src, names.normalize(name), preset)).sha256)
        else:
            job = quantize.plan(
                sup.catalog, sup.store, source, str(qtype), name, allow_requantize=allow, replace=True
            )
            events = _quantized(sup, job, src.preset if preset is None else preset)
    if body.get("stream", True) is False:

        async def drain() -> None:
            try:
                async for _ in events:
                    pass
            finally:
                await events.aclose()

        await proxy.unless_gone(drain(), req.client)  # a client that leaves stops the tool
        return 200, JSON_HEADERS, orjson.dumps({"status": "success"})
    first = await anext(events)
    await stream_events(req, proto, first, events, f"create of {name}", "the new model is not made", sup.data)
    return None


_FOR_LANGUAGE_MODELS = (
    "system prompts, options and messages are for language models; create the speech model without them"
)


def _source(sup: Supervisor, name: str, fields: Mapping[str, Any]) -> ModelRow:
    """The catalog model a create makes the new one from: not a LoRA adapter (its settings are its base's), and
    a preset only for a language model (a whisper model's requests never take one)."""
    adapter = sup.loras.find(name) if sup.catalog.find(name) is None else None
    if adapter is not None:
        raise HttpError(
            400,
            f"'{adapter.name}' is a LoRA adapter, served with its base model's settings; create from its base"
            f" '{adapter.base}' instead (with 'adapters' naming the adapter's uploaded file to make a new adapter)",
        )
    src = sup.catalog.get(name)
    if fields and src.format == "whisper":
        raise HttpError(400, f"'{src.name}' is a whisper.cpp speech model: {_FOR_LANGUAGE_MODELS}")
    return src


def _one_blob(value: Any, field: str) -> tuple[str, str]:
    """The one GGUF file of a create's ``files`` or ``adapters`` (``{"name.gguf": "sha256:<hex>"}``): (its
    name, its digest's hex)."""
    if not isinstance(value, dict) or len(value) != 1:
        got = f"{len(value)} files" if isinstance(value, dict) else type(value).__name__
        raise HttpError(
            400,
            f'\'{field}\' must name one GGUF file and its uploaded blob ({{"model.gguf": "sha256:..."}}); got'
            f" {got} (a safetensors model is imported with blazar import DIR, a projector with mmproj in config.toml)",
        )
    ((filename, digest),) = value.items()
    if not isinstance(filename, str) or not filename.lower().endswith((".gguf", ".bin")):
        raise HttpError(400, f"'{field}' takes a GGUF file (name.gguf), got {str(filename)[:80]!r}")
    return filename, blobs.hex_of(digest, f"the digest of '{filename[:80]}' in '{field}'")


async def _from_blob(
    sup: Supervisor,
    name: str,
    files: Any,
    adapters: Any,
    base: str,
    fields: Mapping[str, Any],
    quantized: bool,
) -> str:
    """A create from an uploaded blob (what ``ollama create`` sends for ``FROM ./model.gguf`` or ``ADAPTER
    ./lora.gguf``): the GGUF becomes catalog model ``name`` (with the preset ``fields``), or LoRA adapter
    ``name`` over catalog model ``base``. The blob stays (the catalog's file is a hard link of it, so it takes no
    space of its own) for other creates from it, as Ollama keeps blobs, until ``blobs.prune``. Its digest."""
    if quantized:
        raise HttpError(
            400,
            "create the model from its file first, then quantize it with a second create ('from' + 'quantize')",
        )
    full = names.normalize(name)
    if files is not None:
        if adapters is not None:
            raise HttpError(
                400, "'files' and 'adapters' together: create the model, then its adapter from it"
            )
        _filename, hexd = _one_blob(files, "files")
        old = sup.catalog.find(full)
        if old is not None and old.sha256 == hexd:  # the same weights again (an edited Modelfile): the preset
            if fields and old.format == "whisper":
                raise HttpError(
                    400, f"the uploaded file is a whisper.cpp speech model: {_FOR_LANGUAGE_MODELS}"
                )
            sup.catalog.set_preset(full, presets.merge(None, fields) if fields else None)
            return hexd
        path = blobs.take(sup, hexd)
        async with _blob_errors(path, hexd):
            # checked before a model of this name is replaced by it
            if await asyncio.to_thread(_readable, path) and fields:
                raise HttpError(
                    400, f"the uploaded file is a whisper.cpp speech model: {_FOR_LANGUAGE_MODELS}"
                )
            if old is not None:  # replaced in one step once the file is in hand: a failure keeps it
                await ollama_admin.stop_engines(sup, full, old, "replaced by /api/create")
            row = await asyncio.to_thread(
                # replace=True whether or not it existed when looked at: a create of the same name running at the
                # same time may add it meanwhile, and the last one wins, as in Ollama
                functools.partial(sup.catalog.import_file, path, full, sha256=hexd, replace=True)
            )
        if fields:
            sup.catalog.set_preset(row.name, presets.merge(None, fields))
        return hexd
    if fields:
        raise HttpError(
            400,
            "a LoRA adapter is served with its base model's own settings in Blazar; send system, parameters and"
            " messages with each request, or create a model with them from the base first",
        )
    _filename, hexd = _one_blob(adapters, "adapters")
    path = blobs.take(sup, hexd)
    again = sup.loras.find(full) is not None  # made again, as Ollama overwrites a name
    async with _blob_errors(path, hexd):
        await asyncio.to_thread(functools.partial(sup.loras.add, path, base, full, replace=again))
    if again:
        sup.forget_lora(full)
    return hexd


@contextlib.asynccontextmanager
async def _blob_errors(path: Path, hexd: str) -> AsyncIterator[None]:
    """A catalog or adapter error about the blob names it by digest: never the server's path to it."""
    try:
        yield
    except HttpError:  # the gateway's own answer: it names no path
        raise
    except BlazarError as e:
        raise HttpError(e.status, str(e).replace(str(path), f"the uploaded file sha256:{hexd}")) from None


def _readable(path: Path) -> bool:
    """Refuse a blob that is neither a GGUF nor a whisper.cpp model (400) before anything changes; whether it is
    a whisper.cpp model."""
    if ggml_whisper.read(path) is not None:
        return True
    read_header(path)
    return False


async def _made(sup: Supervisor, src: ModelRow, name: str, preset: Mapping[str, Any] | None) -> ModelRow:
    """Model ``name`` as ``src``'s weights with ``preset`` (None: the source's own). A name that exists is made
    again, as Ollama overwrites it: edit a Modelfile and create again. With the same weights (created from itself,
    or from the model it is a copy of) only its preset changes; with others it is replaced."""
    old = sup.catalog.find(name)
    if old is not None and _same_weights(old, src):
        return sup.catalog.set_preset(name, src.preset if preset is None else preset)
    if old is not None:
        await ollama_admin.stop_engines(sup, name, old, "replaced by /api/create")
    row = sup.catalog.copy(src.name, name, replace=True)  # the last of concurrent creates wins, as in Ollama
    return row if preset is None else sup.catalog.set_preset(row.name, preset)


def _same_weights(a: ModelRow, b: ModelRow) -> bool:
    try:
        return a.name == b.name or os.path.samefile(a.path, b.path)
    except OSError:
        return False


async def _copied(digest: str | None) -> AsyncGenerator[Event, None]:
    if digest is not None:
        yield Event(f"using existing layer sha256:{digest}")
    yield Event("writing manifest")
    yield Event("success")


async def _quantized(
    sup: Supervisor, job: quantize.Job, preset: Mapping[str, Any] | None
) -> AsyncGenerator[Event, None]:
    yield Event(job.status)

    async def replace_old() -> None:  # a name that exists is made again, as Ollama overwrites it
        old = sup.catalog.find(job.name)
        if old is not None:
            await ollama_admin.stop_engines(sup, job.name, old, "replaced by /api/create")

    steps = quantize.run_async(sup.catalog, job, replace_old)
    try:
        async for done, total in steps:
            yield Event(job.status, total=total, completed=done)
    finally:
        await steps.aclose()
    if preset:
        sup.catalog.set_preset(job.name, preset)
    yield Event("writing manifest")
    yield Event("success")
