"""Which engine a request runs on, and whether its key may have it: the first thing a handler does with a canonical
request.

It owns: the route of a client-given model name (catalog name, child key, slot count, preset), memoised per name
for the catalog's language models; the key's scope and quotas for that model (``claim``: 403/429 before any engine
starts); a request of the wrong kind for its model (audio for a language model, text for a whisper model); and the
``x-blazar-ignored`` notes of what a request asked that cannot apply. No I/O: ``core`` does the serving.
"""

from __future__ import annotations

import time

from blazar.catalog import names, presets
from blazar.catalog.presets import Preset
from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway import remote, tenancy
from blazar.gateway.http import HttpError, Request
from blazar.launch.settings import model_settings
from blazar.paths import EMBED_SUFFIXES, child_key, safe_component
from blazar.supervisor import Supervisor
from blazar.supervisor.remotes import Remote

ROUTE_MEMO_SECS = 1.0
"""How long ``route_target`` trusts its memo of a model's route and preset before reading the catalog again."""
_ROUTES_MAX = 1024
"""Distinct (client model name, kind) pairs remembered by ``route_target``; the table is cleared past this."""


def route_target(sup: Supervisor, canon: CanonicalRequest) -> tuple[str, str, int]:
    """Once per request: the catalog name, the child key (embeddings run in their own ``@embed`` child; a LoRA
    adapter runs on its base model's) and the model's slot count N for admission (1 for a whisper model: its
    server transcribes one file at a time)."""
    return _route(sup, canon)[0]


Route = tuple[tuple[str, str, int], HttpError | None, Preset | None]


def _route(sup: Supervisor, canon: CanonicalRequest) -> Route:
    """``route_target``'s answer, the error for a request of the wrong kind for its model (audio for a
    language model, text for a whisper model), which ``claim_local`` raises once the key's scope is checked, and
    the model's preset (``presets``), which it applies. Memoised per client-given name in ``sup.routes`` for the
    catalog's language models (the config is immutable, so their answer never changes, and they take every kind
    but audio) while this process has not changed a model row (``Catalog.generation``), and for at most
    ``ROUTE_MEMO_SECS``, so a change from another process (``blazar rm`` and an import of that name) is seen
    within that; adapters, whisper models and unknown names are looked up each
    time, as they may change at run time."""
    embedding = canon.kind == "embedding"
    audio = canon.kind == "audio"
    routes = sup.routes
    use = (canon.model, embedding, canon.late_chunking)
    hit = routes.get(use) if not audio else None
    now = time.monotonic()
    if hit is not None and now < hit[2] and hit[3] == sup.catalog.generation:
        return hit[0], None, hit[1]
    name = names.normalize(canon.model)
    adapter = sup.loras.find(name)
    base = adapter.base if adapter is not None else name  # a LoRA adapter queues for its base model's engine
    row = sup.catalog.find(name) if adapter is None else None
    whisper = row is not None and row.format == "whisper"
    wrong = (
        wrong_kind(name, whisper) if whisper != audio and (row is not None or adapter is not None) else None
    )
    slots = 1 if whisper else model_settings(sup.cfg, base).slots(embeddings=embedding or canon.late_chunking)
    engine = sup.sharing.owner(base)  # a model over another's weights file shares its engine
    target = name, child_key(engine, embedding, canon.late_chunking), slots
    if row is None or whisper:
        return target, wrong, None
    preset = presets.compile(row.preset)
    if len(routes) >= _ROUTES_MAX:
        routes.clear()
    routes[use] = (target, preset, now + ROUTE_MEMO_SECS, sup.catalog.generation)
    return target, wrong, preset


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


def claim(sup: Supervisor, req: Request, canon: CanonicalRequest) -> tuple[str, str, int]:
    """``route_target``, then the key's scope and quotas for that model (403/429). Every path that touches a
    model's engine claims it first: generation, embeddings, fill-in-the-middle, loads and unloads, token counts.
    A ``remote:model`` name is refused here, naming the feature that needs a local engine: the paths that serve
    remotes claim them with ``claim_remote``."""
    if sup.remote_for(canon.model) is not None:
        raise remote.not_here(
            canon.model, "this endpoint (token counting and fill-in-the-middle work on local models only)"
        )
    return claim_local(sup, req, canon)


def claim_local(sup: Supervisor, req: Request, canon: CanonicalRequest) -> tuple[str, str, int]:
    """``claim`` once ``claim_remote`` found the name local (so the remotes are not asked twice). After the key's
    scope (a key learns nothing of the models outside it), a request of the wrong kind for its model (audio for
    a language model, text for a whisper model) is refused, before an engine starts for it."""
    target, wrong, preset = _route(sup, canon)
    req.gate.check_model(req, target[0], canon)
    if req.key is not None:
        # the engine may be another model's (a copy over the same weights, a LoRA adapter's base): a scoped key
        # that may not see that model hears of it under the name it asked for
        owner = target[1].removesuffix(EMBED_SUFFIXES[0]).removesuffix(EMBED_SUFFIXES[1])
        if owner != target[0] and not tenancy.visible(req, owner):
            req.renames = {owner: target[0], safe_component(owner): safe_component(target[0])}
    if wrong is not None:
        raise wrong
    if preset is not None:
        presets.apply(preset, canon)
    _note(req, canon)
    return target


def _note(req: Request, canon: CanonicalRequest) -> None:
    if canon.notes:
        req.set_header(IGNORED, ignored_header(canon.notes))


def claim_remote(sup: Supervisor, req: Request, canon: CanonicalRequest) -> tuple[Remote, str] | None:
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
