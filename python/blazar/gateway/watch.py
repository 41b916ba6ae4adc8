"""The sentinel's place in a request: judging the answer just given, logging what it found, and for a whole
answer naming it in ``x-blazar-sentinel`` or, with ``sentinel_enforce``, answering 422 instead.

The judgement is ``blazar.sentinel.judge``'s. Whatever goes wrong in it is logged and judges nothing: the sentinel
never fails an answer it was only meant to watch. ``sentinel = false`` turns it off; a request for several
choices (``n`` > 1) is not judged, since the summary holds only the first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from blazar.dialects.canonical import CanonicalRequest
from blazar.gateway.http import HttpError, Request
from blazar.sentinel import judge as sentinel
from blazar.supervisor import Supervisor

log = logging.getLogger("blazar.sentinel")

HEADER = "x-blazar-sentinel"


def observe(sup: Supervisor, req: Request, canon: CanonicalRequest) -> list[sentinel.Finding]:
    """The sentinel's findings on the answer just given (``req.summary``), logged; never changes the answer."""
    if req.summary is None or not sup.cfg.sentinel or canon.choices() > 1:
        return []
    try:
        findings = sentinel.judge(canon, req.summary, float(sup.cfg.sentinel_stall_secs))
    except Exception:
        log.exception(
            "sentinel: judging the answer failed (trace %s); the answer is unaffected", req.trace_id
        )
        return []
    if findings:
        req.gate.metrics.found(f.code for f in findings)
        who = f", key {req.key.name}" if req.key is not None else ""
        log.warning(
            "sentinel: %s answered %s (trace %s%s): %s",
            canon.model,
            "a stream" if canon.stream else "whole",
            req.trace_id,
            who,
            "; ".join(map(str, findings)),
        )
    return findings


@dataclass(frozen=True, slots=True)
class Stall:
    """A relayed stream's stall watch: ``report`` is called once when its engine has been quiet ``secs``."""

    secs: float
    report: Callable[[float], None]


def on_stall(sup: Supervisor, req: Request, canon: CanonicalRequest) -> Stall | None:
    """The stall watch of a stream: once its engine has sent nothing for ``sentinel_stall_secs``, a warning while
    the client still waits (the judgement at the end names the longest pause again). None when the sentinel would
    not judge this stream."""
    stall = float(sup.cfg.sentinel_stall_secs)
    if not sup.cfg.sentinel or stall <= 0 or canon.choices() > 1:
        return None
    who = f", key {req.key.name}" if req.key is not None else ""

    def stalled(quiet: float) -> None:
        log.warning(
            "sentinel: %s's stream has sent nothing for %.1fs (trace %s%s; sentinel_stall_secs is %g);"
            " the client is still waiting",
            canon.model,
            quiet,
            req.trace_id,
            who,
            stall,
        )

    return Stall(stall, stalled)


def judge_whole(sup: Supervisor, req: Request, canon: CanonicalRequest) -> None:
    """``observe`` for a whole answer: its codes in ``x-blazar-sentinel``, and with ``sentinel_enforce`` a 422
    instead of the answer (usage is still charged: the engine did the work)."""
    findings = observe(sup, req, canon)
    if not findings:
        return
    req.set_header(HEADER, sentinel.header_value(findings))
    if sup.cfg.sentinel_enforce:
        raise HttpError(422, sentinel.enforce_message(findings), "sentinel_violation")
