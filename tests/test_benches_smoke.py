"""The gateway and middleware benchmark scripts run end to end, each in its ``--quick`` mode (a few seconds).

They prove the scripts work (servers start, every target answers, the report has its figures); no timing is
asserted here, ever: the figures live in benches/README.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parent.parent / "benches"


def run_quick(script: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    r = subprocess.run(
        [sys.executable, str(BENCHES / script), "--quick", "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, f"{script} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_bench_gateway_quick(tmp_path: Path, model_file: Path) -> None:
    report = run_quick("bench_gateway.py", tmp_path, "--model", str(model_file))
    events = report["events_per_response"]
    for target in ("direct", "bare", "blazar"):
        assert events[target]["stream"] == events["direct"]["stream"] > 0
        for scenario in ("whole", "stream", "burst"):
            cell = report["cells"][f"{target}/{scenario}/1"]
            assert cell["requests"] > 0, (target, scenario, cell)
            assert cell["errors"] == 0, (target, scenario, cell)
            assert cell["cpu_ms_per_req"] is not None
    assert {t["what"] for t in report["targets"]} >= {"Blazar req/s / bare (whole, c=1)"}
    assert report["overhead_header"]["sequential"]["whole"]["n"] > 0


def test_bench_middleware_quick(tmp_path: Path) -> None:
    report = run_quick("bench_middleware.py", tmp_path)
    assert set(report["in_process"]) == {"healthz", "models", "models-nokeys", "chat"}
    for case in report["in_process"].values():
        assert case["blazar_us"] > 0 and case["bare_us"] > 0
    for path in ("/healthz", "/v1/models"):
        assert report["http"][path]["blazar"]["rps"] > 0
        assert report["http"][path]["bare"]["rps"] > 0


def test_bench_stack_quick(tmp_path: Path) -> None:
    report = run_quick("bench_stack.py", tmp_path)
    cells = report["cells"]
    for variant in ("rsgi+aiohttp", "asgi+aiohttp", "rsgi+httpx", "rsgi+native"):
        for scenario in ("whole", "stream", "burst"):
            cell = cells[f"{variant}/{scenario}/1"]
            assert cell["requests"] > 0, (variant, scenario, cell)
            assert cell["errors"] == 0, (variant, scenario, cell)
            assert cell["cpu"] is not None and cell["cpu_vs_base"] is not None
    assert cells["rsgi+aiohttp/whole/1"]["cpu_vs_base"] == 1.0
