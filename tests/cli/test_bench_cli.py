"""`blazar bench` against a real daemon and llama-server: median speeds printed, one bench_history row per run
of the command, and the previous result shown beside the next."""

from __future__ import annotations

import sqlite3

import orjson
import pytest

from tests.conftest import Daemon

pytestmark = pytest.mark.e2e


def test_bench_measures_through_the_daemon_and_keeps_a_history(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory()
    args = ("bench", "smollm2", "--prompt-tokens", "64", "--gen-tokens", "8", "--runs", "2")
    out = d.cli(*args).stdout
    assert "smollm2:latest on llama-cpp " in out and "median of 2 run(s)" in out, out
    assert "previous" not in out
    for label in ("prompt", "generation"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(label))
        assert float(line.split()[-2]) > 0, line  # tok/s
    second = orjson.loads(d.cli(*args, "--json").stdout)
    assert second["model"] == "smollm2:latest" and second["engine"] == "llama-cpp" and second["runs"] == 2
    assert second["gen_tokens"] == 8 and second["prompt_tokens"] >= 60  # the engine's own counts
    assert second["gen_tps"] > 0 and second["prompt_tps"] > 0 and second["ttft_ms"] > 0
    assert second["previous"] is not None and second["previous"]["gen_tps"] > 0
    with sqlite3.connect(d.data_dir / "blazar.db") as db:
        rows = db.execute("SELECT model, engine_kind, gen_tps FROM bench_history").fetchall()
    assert [(m, k) for m, k, _ in rows] == [("smollm2:latest", "llama-cpp")] * 2

    ghost = d.cli("bench", "ghost", "--runs", "1", check=False)
    assert ghost.returncode == 1 and "ghost" in ghost.stderr and "Traceback" not in ghost.stderr
