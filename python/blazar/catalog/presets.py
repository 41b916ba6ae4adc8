"""Model presets: what Ollama's ``/api/create`` (a Modelfile's ``SYSTEM``, ``PARAMETER``, ``MESSAGE`` and
``LICENSE``) gives a model made from another: its own system prompt, a conversation before every chat, default
options and a license, over the same weights.

A preset is stored with the model (``models.preset_json``) in Ollama's own field shapes (``system``,
``parameters``, ``messages``, ``license``), so ``/api/show`` gives back what was sent. ``compile`` checks it as
the Ollama dialect checks a request's ``options`` and ``messages`` and makes the canonical ``Preset``; ``apply``
fills a request with it: the system prompt when the request has none, the conversation before the request's own
messages, and each option the request did not set (its context, ``num_ctx``, too). Options and a system prompt a
request sends win, as in Ollama. One difference: when a request has a system message of its own, Ollama puts the
preset's conversation before it; here it comes after it, so the system message stays first (many Jinja chat
templates refuse a system message anywhere else).

It owns the preset's checks, merging and application; the catalog stores it and ``gateway.core`` applies it to
each request for the model. It must not do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from blazar.dialects import ollama
from blazar.dialects.canonical import CanonicalRequest, DialectError

FIELDS = ("system", "parameters", "messages", "license")
"""The preset's fields, named as Ollama's create request names them."""


class PresetError(ValueError):
    """A preset field that cannot be taken (a 400 naming it)."""


@dataclass(frozen=True, slots=True)
class Preset:
    """A preset in canonical terms: the system message, the conversation, llama-server params, the context."""

    system: str | None
    messages: tuple[dict[str, Any], ...]
    params: Mapping[str, Any]
    options_ctx: int | None


def check(given: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The preset fields of a create request, checked: (the fields to store, notes on options that are set when
    an engine starts and so cannot be a preset's; they are left out)."""
    out: dict[str, Any] = {}
    system = given.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise PresetError(
                f"'system' must be a string, the model's system prompt; got {type(system).__name__}"
            )
        if system:
            out["system"] = system
    lic = given.get("license")
    if lic is not None:
        if isinstance(lic, str):
            lic = [lic]
        if not isinstance(lic, list) or not all(isinstance(x, str) for x in lic):
            raise PresetError("'license' must be a string or an array of strings")
        if lic:
            out["license"] = lic
    notes: list[str] = []
    try:
        canon = ollama.preset_request(given.get("parameters"), given.get("messages"))
    except DialectError as e:
        raise PresetError(e.message) from None
    params = given.get("parameters")
    if params:
        kept = {k: v for k, v in params.items() if v is not None and ollama.is_request_option(k)}
        notes = [n for n in canon.notes if n.startswith("option ")]
        if kept:
            out["parameters"] = kept
    if canon.has_images():
        raise PresetError("a preset's messages carry text only: send images with the requests that need them")
    if given.get("messages"):
        out["messages"] = [_stored(m) for m in given["messages"]]
    return out, notes


def _stored(message: Mapping[str, Any]) -> dict[str, Any]:
    """A preset message as it is kept and shown: its role lower-cased, its content, and an assistant's
    ``thinking`` and ``tool_calls``; any other key dropped."""
    role = str(message["role"]).lower()
    out: dict[str, Any] = {"role": role, "content": message.get("content") or ""}
    for key in ("thinking", "tool_calls"):
        if role == "assistant" and message.get(key):
            out[key] = message[key]
    if role == "tool" and message.get("tool_name"):
        out["tool_name"] = message["tool_name"]
    return out


def merge(base: Mapping[str, Any] | None, given: Mapping[str, Any]) -> dict[str, Any]:
    """A new model's preset: its source's, with each field the create gave replacing that field (parameters
    one by one, as a Modelfile's ``PARAMETER`` lines override the ``FROM`` model's; licenses added)."""
    out = dict(base or {})
    for key, value in given.items():
        if key == "parameters":
            out["parameters"] = {**out.get("parameters", {}), **value}
        elif key == "license":  # Ollama adds a license to the source's, never drops one
            have = list(out.get("license", []))
            out["license"] = have + [x for x in value if x not in have]
        else:
            out[key] = value
    return out


def compile(stored: Mapping[str, Any] | None) -> Preset | None:
    """The canonical preset of a stored one (checked when it was stored); None for none."""
    if not stored:
        return None
    canon = ollama.preset_request(stored.get("parameters"), stored.get("messages"))
    system = stored.get("system")
    return Preset(
        system=system if isinstance(system, str) and system else None,
        messages=tuple(canon.messages),
        params=dict(canon.params),
        options_ctx=canon.options_ctx,
    )


def apply(preset: Preset, canon: CanonicalRequest) -> None:
    """Fill ``canon`` (chat or completion) with ``preset``: options it did not set; for a chat, the system
    prompt when it has no system message, then the preset's conversation before its own messages. A request
    that only loads the model gets its context (``num_ctx``), so the engine it starts is the one its chats need.
    A request's own option wins, even one that asks for the engine's default (``num_predict`` -1: None)."""
    if canon.kind not in ("chat", "completion"):
        return
    if canon.options_ctx is None:
        canon.options_ctx = preset.options_ctx
    if canon.load_only:
        return
    stops = "stop" in preset.params and "stop" not in canon.params
    for key, value in preset.params.items():
        canon.params.setdefault(key, value)
    if (
        stops
    ):  # as the Anthropic dialect asks for its own stop_sequences: the reply names the stop word it hit
        canon.params.setdefault("verbose", True)
        canon.params.setdefault("response_fields", ["stop_type", "stopping_word"])
    if canon.kind != "chat":
        return
    has_system = bool(canon.messages) and canon.messages[0].get("role") == "system"
    lead = [] if has_system or preset.system is None else [{"role": "system", "content": preset.system}]
    if preset.messages:
        at = 1 if has_system else 0
        canon.messages[at:at] = [dict(m) for m in preset.messages]
    canon.messages[0:0] = lead


def show_parameters(stored: Mapping[str, Any] | None) -> str:
    """The preset's options as Ollama's ``/api/show`` ``parameters`` text: one ``name value`` line each, a list
    (``stop``) one line per item, strings JSON-quoted (a stop of a newline stays on its line, as Ollama's ``%#v``
    keeps it), numbers and booleans as JSON."""
    lines = []
    for key, value in ((stored or {}).get("parameters") or {}).items():
        for item in value if isinstance(value, list) else [value]:
            lines.append(f"{key:<30} {orjson.dumps(item).decode()}")
    return "\n".join(lines)


def _quoted(text: str) -> str:
    """Modelfile text: in triple quotes, or JSON-quoted when triple quotes cannot hold it (it has them itself,
    ends with a quote, or holds control characters other than newlines and tabs)."""
    plain = '"""' not in text and not text.endswith('"') and all(c >= " " or c in "\n\t" for c in text)
    return f'"""{text}"""' if plain else orjson.dumps(text).decode()


def modelfile_lines(stored: Mapping[str, Any] | None) -> list[str]:
    """The preset as a Modelfile's ``SYSTEM``, ``PARAMETER``, ``MESSAGE`` and ``LICENSE`` lines (``/api/show``)."""
    if not stored:
        return []
    lines = []
    if stored.get("system"):
        lines.append(f"SYSTEM {_quoted(stored['system'])}")
    lines += [f"PARAMETER {line}" for line in show_parameters(stored).splitlines()]
    for m in stored.get("messages") or []:
        lines.append(f"MESSAGE {m.get('role')} {_quoted(m.get('content') or '')}")
    lines += [f"LICENSE {_quoted(text)}" for text in stored.get("license") or []]
    return lines
