"""What a chat or completion sends its engine and how the answer is turned back, decided without I/O.

``plan`` takes the canonical request, the launch spec of the engine that serves it and the few facts the
gateway holds at that moment (slot count, a pinned slot, the LoRA choice) and returns a ``Plan``: the engine path
and body, and the native translator's options. ``core`` sends it; the golden replay (``tests/golden/replay.py``)
calls the same function, so what it checks is what is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blazar._native import StreamTranslator, translate_whole
from blazar.dialects.canonical import CanonicalRequest, render_engine
from blazar.dialects.ollama import WHOLE_CONTEXT
from blazar.gateway.http import HttpError
from blazar.launch.preflight import check_images_readable, check_request_fits
from blazar.launch.spec import LaunchSpec


@dataclass(frozen=True, slots=True)
class Shape:
    """How a client dialect wants responses: the translator's dialect and the stream's content type."""

    translator: str
    stream_type: str


OPENAI = Shape("openai", "text/event-stream")
OLLAMA_CHAT = Shape("ollama_chat", "application/x-ndjson")
OLLAMA_GENERATE = Shape("ollama_generate", "application/x-ndjson")
ANTHROPIC = Shape("anthropic", "text/event-stream")
RESPONSES = Shape("responses", "text/event-stream")


@dataclass(frozen=True, slots=True)
class Plan:
    """One engine request and how its answer is translated for the client (see ``plan``)."""

    path: str
    body: dict[str, Any]
    shape: Shape
    model: str
    """The model name the client's answer carries (the one it asked for)."""
    include_usage: bool
    prefill: str | None
    """The assistant message llama-server repeats at the start of its answer, cut from the client's."""
    n: int
    echo: str | None
    alternatives: bool

    def stream(self, load_ns: int, forced_call: list[str] | None = None) -> StreamTranslator:
        """The translator for the streamed answer (``forced_call``: a forced tool call's candidate tools, when
        the engine's output is constrained to one; see ``forced_tools``)."""
        return StreamTranslator(
            self.shape.translator,
            self.model,
            include_usage=self.include_usage,
            load_duration_ns=load_ns,
            prefill=self.prefill,
            n=self.n,
            echo=self.echo,
            alternatives=self.alternatives,
            forced_call=forced_call,
        )

    def whole(self, data: bytes, load_ns: int = 0, total_ns: int = 0) -> tuple[bytes, dict[str, Any]]:
        """The client's body and the summary for the engine's whole answer ``data``."""
        return translate_whole(
            self.shape.translator,
            self.model,
            data,
            load_duration_ns=load_ns,
            total_duration_ns=total_ns,
            prefill=self.prefill,
            n=self.n,
            echo=self.echo,
            alternatives=self.alternatives,
        )


def plan(
    canon: CanonicalRequest,
    spec: LaunchSpec,
    shape: Shape,
    *,
    slots: int,
    owner: str | None = None,
    body_bytes: int = 0,
    slot: int | None = None,
    lora: list[dict[str, Any]] | None = None,
) -> Plan:
    """The engine request for ``canon`` on an engine launched from ``spec`` and its translation for ``shape``.

    ``slots``: the model's parallel slots; ``owner``: the model whose engine serves it, named in the messages
    (default: the one asked for); ``body_bytes``: the client body's size (the prompt preflight);
    ``slot``: the slot a session is pinned to; ``lora``: llama-server's ``lora`` member (``adapters.choice``).
    Raises the client's 400 when the request cannot be served there (a prompt over the slot's context, images
    the engine cannot read, more choices than slots on an engine that runs each in one).
    """
    check_request_fits(canon, spec.ctx_per_slot, body_bytes)
    if canon.has_images():
        check_images_readable(canon, spec.reads_images)
    can = spec.can
    choices = canon.choices()
    if choices > slots and can.choices_in_slots:
        model = owner or canon.model
        raise HttpError(
            400,
            f"'n' is {choices}, but model '{model}' runs {slots} parallel slot(s) and llama-server"
            f" generates each choice in a slot of its own; send n <= {slots}, or raise parallel for the model"
            f' (parallel under [models."{model}"] in config.toml)',
            "invalid_request_error",
        )
    path, body = render_engine(canon)
    if spec.engine_model is not None:  # sglang, mlx-lm and mistral.rs route by the body's model
        body["model"] = spec.engine_model
    if body.get("repeat_last_n") == WHOLE_CONTEXT:  # Ollama's -1, which llama-server does not take
        body["repeat_last_n"] = spec.ctx_per_slot or spec.ctx_size
    if lora is not None:
        body["lora"] = lora
    if canon.stream and shape.translator == "anthropic" and can.progress_reports:
        # the prompt's size before its first token, for message_start's input_tokens
        body["return_progress"] = True
    if slot is not None:
        body["id_slot"] = slot
        body.setdefault("cache_prompt", True)
    return Plan(
        path=path,
        body=body,
        shape=shape,
        model=canon.model,
        include_usage=canon.include_usage,
        prefill=canon.prefill() if can.prefill_echo else None,
        n=choices,
        echo=canon.echo,
        alternatives=canon.alternatives,
    )
