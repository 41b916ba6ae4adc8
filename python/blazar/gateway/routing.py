"""Which engine a request runs on, and whether its key may have it: the first thing a handler does with a canonical
request.

It owns: the route of a client-given model name (catalog name, child key, slot count, preset: its placement,
``supervisor.placement``, memoised there); the key's scope and quotas for that model (``claim``: 403/429 before any engine
starts); a request of the wrong kind for its model (audio for a language model, text for a whisper model); and the
``x-blazar-ignored`` notes of what a request asked that cannot apply. No I/O: ``core`` does the serving.
"""

from __future__ import annotations

from blazar.catalog import presets
from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway import remote, tenancy
from blazar.gateway.http import HttpError, Request
from blazar.paths import EMBED_SUFFIXES, safe_component
from blazar.supervisor import Supervisor
from blazar.supervisor.placement import Placement
from blazar.supervisor.remotes import Target


def route_target(sup: Supervisor, canon: CanonicalRequest) -> Placement:
    """Once per request: the name's placement (``supervisor.placement``): the catalog name, the child key
    (embeddings run in their own ``@embed`` child; a LoRA adapter runs on its base model's), the slots of one
    engine (1 for a whisper model: its server transcribes one file at a time) and its replicas."""
    return _place(sup, canon)


def _place(sup: Supervisor, canon: CanonicalRequest) -> Placement:
    return sup.placements.place(canon.model, embedding=canon.kind == "embedding", tokens=canon.late_chunking)


def wrong_kind(name: str, whisper: bool) -> HttpError:
    if whisper:
        return HttpError(
            400,
            f"model '{name}' is a whisper.cpp speech model: send its audio to POST /v1/audio/transcriptions",
        )
    return HttpError(
        400,
        f"model '{name}' is not a whisper.cpp model; transcriptions need one (import a ggml .bin with blazar import"
        " FILE --name NAME)",
    )


def claim(sup: Supervisor, req: Request, canon: CanonicalRequest) -> Placement:
    """``route_target``, then the key's scope and quotas for that model (403/429). Every path that touches a
    model's engine claims it first: generation, embeddings, fill-in-the-middle, loads and unloads, token counts.
    A ``remote:model`` name is refused here, naming the feature that needs a local engine: the paths that serve
    remotes claim them with ``claim_remote``."""
    if sup.remote_for(canon.model) is not None:
        raise remote.not_here(
            canon.model, "this endpoint (token counting and fill-in-the-middle work on local models only)"
        )
    return claim_local(sup, req, canon)


def claim_local(sup: Supervisor, req: Request, canon: CanonicalRequest) -> Placement:
    """``claim`` once ``claim_remote`` found the name local (so the remotes are not asked twice). After the key's
    scope (a key learns nothing of the models outside it), a request of the wrong kind for its model (audio for
    a language model, text for a whisper model) is refused, before an engine starts for it."""
    placed = _place(sup, canon)
    req.gate.check_model(req, placed.name, canon, placed.ctx_per_slot)
    if req.key is not None:
        # the engine may be another model's (a copy over the same weights, a LoRA adapter's base): a scoped key
        # that may not see that model hears of it under the name it asked for
        owner = placed.key.removesuffix(EMBED_SUFFIXES[0]).removesuffix(EMBED_SUFFIXES[1])
        if owner != placed.name and not tenancy.visible(req, owner):
            req.renames = {owner: placed.name, safe_component(owner): safe_component(placed.name)}
    known = placed.row is not None or placed.adapter is not None
    if known and placed.whisper != (canon.kind == "audio"):  # audio for a language model, text for whisper
        raise wrong_kind(placed.name, placed.whisper)
    if placed.preset is not None:
        presets.apply(placed.preset, canon)
    _note(req, canon)
    return placed


def _note(req: Request, canon: CanonicalRequest) -> None:
    if canon.notes:
        req.set_header(IGNORED, ignored_header(canon.notes))


def claim_remote(sup: Supervisor, req: Request, canon: CanonicalRequest) -> tuple[Target, str] | None:
    """For a ``remote:model`` name: the key's scope and quotas under that name, and (the remote, its model);
    None for a local model."""
    hit = sup.remote_for(canon.model)
    if hit is not None:
        req.gate.check_model(req, canon.model, canon)
        _note(req, canon)
    return hit


IGNORED = "x-blazar-ignored"


def note_ignored(req: Request, note: str) -> None:
    """Add ``note`` to the response's ``x-blazar-ignored`` header (one header, sentences joined)."""
    have = req.response_header(IGNORED)
    if have is None or note not in have:  # a retried request notes it once
        req.set_header(IGNORED, ignored_header([have, note] if have else [note]))


def ignored_header(notes: list[str]) -> str:
    """The request's accepted-but-ignored fields, one sentence each, as an ``x-blazar-ignored`` header value:
    printable ASCII only (a note may quote a client's option name), at most 2,000 characters."""
    text = " | ".join(notes)
    clean = "".join(c if " " <= c <= "~" else "?" for c in text)
    return clean if len(clean) <= 2000 else clean[:1997] + "..."
