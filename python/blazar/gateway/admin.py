"""Blazar's own management endpoints: API keys (/api/keys, /api/keys/rotate), sessions (/api/session), the
engines' crash breakers (/api/breakers, /api/breakers/reset) and the engine updates the last check found
(/api/engines/updates).

Key changes go through the same config round trip as ``blazar keys`` (parse, validate, atomic write, ``.bak``),
off the event loop, and swap the live key registry (rolled back if the write fails). Only full-access keys
manage keys; an authless gateway refuses with the seed's 403.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from blazar.catalog import names
from blazar.engines.check import read_check
from blazar.errors import BlazarError
from blazar.gateway.http import JSON_HEADERS, HttpError, Request
from blazar.gateway.tenancy import visible
from blazar.supervisor import Supervisor
from blazar.tenancy import keys

T = TypeVar("T")

Response = tuple[int, list[tuple[str, str]], bytes]

_LIMITS = ("weight", "max_concurrent", "rpm", "tpm", "daily_tokens")


def _name(body: dict[str, Any]) -> str:
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise HttpError(400, "'name' is required and must be a non-empty string")
    return name


async def list_keys(sup: Supervisor, req: Request, proto: Any) -> Response:
    gate = req.gate
    gate.keys.check_management(req.key)
    return 200, JSON_HEADERS, orjson.dumps({"keys": [k.as_dict() for k in gate.keys.listing()]})


async def _edit(gate: Any, edit: Callable[..., T], *args: Any) -> T:
    """``edit(config_path, *args)`` in a thread; its errors name the file ``config.toml``, never where it is."""
    try:
        return await asyncio.to_thread(edit, gate.config_path, *args)
    except BlazarError as e:
        e.args = tuple(str(a).replace(str(gate.config_path), "config.toml") for a in e.args)
        raise


_ADD_FIELDS = ("name", "models", "secret", *_LIMITS)


async def add_key(sup: Supervisor, req: Request, proto: Any) -> Response:
    gate = req.gate
    gate.keys.check_management(req.key)
    body = req.json_object()
    for field in body:
        if field not in _ADD_FIELDS:  # a misspelt "models" must never make a full-access key
            close = difflib.get_close_matches(field, _ADD_FIELDS, n=1, cutoff=0.6)
            hint = (
                f" (did you mean '{close[0]}'?)" if close else f"; the fields are: {', '.join(_ADD_FIELDS)}"
            )
            raise HttpError(400, f"unknown field '{field}'{hint}")
    models = body.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise HttpError(400, "'models' must be an array of model names (empty: full access)")
    limits = {k: body[k] for k in _LIMITS if k in body}
    for k, v in limits.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise HttpError(400, f"'{k}' must be a number")
    given = body.get("secret")
    if given is not None and not isinstance(given, str):
        raise HttpError(400, "'secret' must be a string (omit it to have one generated)")
    key, secret = await _edit(
        gate, functools.partial(keys.add_key, secret=given, registry=gate.keys, **limits), _name(body), models
    )
    info = {
        "name": key.name,
        "secret": secret,
        "models": list(key.models),
        **{k: getattr(key, k) for k in _LIMITS},
    }
    return 200, JSON_HEADERS, orjson.dumps(info)


async def remove_key(sup: Supervisor, req: Request, proto: Any) -> Response:
    gate = req.gate
    gate.keys.check_management(req.key)
    name = _name(req.json_object())
    await _edit(gate, functools.partial(keys.remove_key, registry=gate.keys), name)
    return 200, JSON_HEADERS, orjson.dumps({"removed": name})


async def rotate_key(sup: Supervisor, req: Request, proto: Any) -> Response:
    gate = req.gate
    gate.keys.check_management(req.key)
    name = _name(req.json_object())
    key, secret = await _edit(gate, functools.partial(keys.rotate_key, registry=gate.keys), name)
    return 200, JSON_HEADERS, orjson.dumps({"name": key.name, "secret": secret})


async def sessions_list(sup: Supervisor, req: Request, proto: Any) -> Response:
    gate = req.gate
    return 200, JSON_HEADERS, orjson.dumps({"sessions": gate.sessions.listing(gate.sessions_seen_by(req))})


async def session_action(sup: Supervisor, req: Request, proto: Any) -> Response:
    body = req.json_object()
    action = body.get("action")
    if action == "list":
        return await sessions_list(sup, req, proto)
    if action != "close":
        raise HttpError(400, '\'action\' must be "close" or "list"')
    name = body.get("session") or req.headers.get("x-blazar-session")
    if not isinstance(name, str) or not name:
        raise HttpError(400, "name the session in 'session' or the x-blazar-session header")
    if not req.gate.sessions.close(name, req.gate.sessions_seen_by(req)):
        raise HttpError(404, f"no open session named '{name}'", "not_found_error")
    return 200, JSON_HEADERS, orjson.dumps({"closed": name})


async def breakers_list(sup: Supervisor, req: Request, proto: Any) -> Response:
    """The engines whose restarts are held back after repeated crashes (a scoped key sees its models only)."""
    held = [
        {
            "model": h.model,
            "engine": h.key,
            "crashes": h.crashes,
            "retry_in_secs": h.retry_in_secs,
            "last": h.last,
        }
        for h in sup.breakers.held()
        # a scoped key sees the engines its models run on: a copy's requests go to its owner's engine
        if any(visible(req, n) for n in (h.model, *sup.sharing.sharers(h.model)))
    ]
    return 200, JSON_HEADERS, orjson.dumps({"held": held})


async def breakers_reset(sup: Supervisor, req: Request, proto: Any) -> Response:
    """Forget the crash history of one model's engines (``{"model": ...}``) or of all: the next request starts
    them again. With keys on, a full-access key only."""
    req.require_full_access("resetting crash breakers")
    model = req.json_object().get("model") if req.body.strip() else None
    if model is not None and (not isinstance(model, str) or not model):
        raise HttpError(400, "'model' must be a model name (omit it to reset every engine)")
    return (
        200,
        JSON_HEADERS,
        orjson.dumps({"reset": sup.breakers.reset(names.normalize(model) if model else None)}),
    )


async def engine_updates(sup: Supervisor, req: Request, proto: Any) -> Response:
    """The engine updates the last check found (``engine_check_secs``, or ``blazar engine check``): each kind with
    a newer release, and the command that installs it. Never installs anything."""
    found = await asyncio.to_thread(read_check, sup.data)
    checked_at, lanes = found if found is not None else (None, [])
    updates = [
        {
            "kind": s.kind,
            "installed": s.installed,
            "active": s.active_tag,
            "newest": s.newest,
            "line": s.line(),
        }
        for s in lanes
        if s.update
    ]
    return 200, JSON_HEADERS, orjson.dumps({"checked_at": checked_at, "updates": updates})
