"""The error tree: every error a client can be answered with is a ``BlazarError``, drawn in ``errors.py``, and the
gateway's envelope reads the same four things (status, type, source, headers) from each."""

from __future__ import annotations

import importlib
import pkgutil
import re

import blazar
from blazar import errors
from blazar.dialects.canonical import DialectError
from blazar.errors import BlazarError, LaneError
from blazar.gateway.http import HttpError
from blazar.supervisor.signals import EngineStopped, EngineWedged
from blazar.tenancy.admission import AllSlotsBusy


def _every_module() -> None:
    for mod in pkgutil.walk_packages(blazar.__path__, "blazar."):
        if not mod.name.endswith("__main__"):  # it runs the CLI
            importlib.import_module(mod.name)


def _subclasses(cls: type) -> set[type]:
    out: set[type] = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_subclasses(sub)}
    return out


def test_every_error_class_in_the_package_is_drawn_in_the_tree() -> None:
    _every_module()
    drawn = set(re.findall(r"\b([A-Z][A-Za-z]+)\b", errors.__doc__ or ""))
    ours = {c for c in _subclasses(BlazarError) if c.__module__.startswith("blazar.")}
    missing = sorted(c.__name__ for c in ours if c.__name__ not in drawn)
    assert not missing, f"draw these in errors.py's tree: {missing}"
    assert {HttpError, DialectError, EngineStopped, EngineWedged} <= ours


def test_the_envelope_reads_one_shape_from_each() -> None:
    http = HttpError(429, "slow down", "rate_limit_error", source="engine", headers=(("retry-after", "3"),))
    assert (http.status, http.message, http.error_type, http.source) == (
        429,
        "slow down",
        "rate_limit_error",
        "engine",
    )
    assert http.response_headers() == [("retry-after", "3")]
    dialect = DialectError(422, "'messages' is required")
    assert (dialect.status, dialect.message, dialect.error_type) == (422, "'messages' is required", None)
    lane = LaneError("no engine serves it; `blazar engine install`")
    assert (lane.status, lane.error_type, lane.source, lane.response_headers()) == (
        503,
        "blazar_error",
        "blazar",
        [],
    )
    busy = AllSlotsBusy("m", 1.0, 7)
    assert busy.response_headers() == [("retry-after", "7")]


def test_a_retry_that_meets_the_same_fault_is_the_clients_answer() -> None:
    stopped = EngineStopped("m", "keep_alive 0")
    assert (stopped.status, stopped.error_type) == (503, "engine_error")
    again = stopped.again()
    assert again.status == 503 and not isinstance(again, EngineStopped) and "retried once" in again.message
    wedged = EngineWedged("m", 10)
    assert wedged.status == 504 and "within 10s" in wedged.message
    assert wedged.again().status == 504 and wedged.again().error_type == "engine_error"
