"""Admission scheduler throughput: the Cython ``blazar_sched.Scheduler`` against the pure-Python heapq baseline.

One operation is one request's whole trip through a model's queue: ``ticket`` + ``enqueue`` + the ``admit_ready``
that starts it + its ``release``. Both schedulers run the same pre-generated request stream in the same process,
back to back in each of ``--repeat`` rounds. Reported: the best round of each (ops/s) and the median of the
per-round ratios, which holds up on a shared, noisy machine better than either figure alone (target: 5x).

Scenarios:
  saturated  N=8 slots, 512 requests queued across 16 keys (weights 0.5..4), mixed priorities, work classes and
             a few explicit deadlines; every release admits the next request, and a new one arrives.
  idle       N=8 slots, nothing queued: every request starts at once and is released.

Usage: python benches/bench_sched.py [--ops N] [--repeat R] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blazar_sched

sys.path.insert(0, str(Path(__file__).resolve().parent / "baselines"))
from heap_scheduler import HeapScheduler

Params = tuple[str, float, int, int, float | None]


def request_stream(n: int, seed: int = 7) -> list[Params]:
    rng = random.Random(seed)
    keys = [(f"key{i:02d}", rng.choice([0.5, 1.0, 1.0, 2.0, 4.0])) for i in range(16)]
    out: list[Params] = []
    for _ in range(n):
        key, weight = rng.choice(keys)
        priority = rng.choices([0, 1, 2], weights=[1, 6, 1])[0]
        work_class = rng.choices([0, 1, 2], weights=[6, 3, 1])[0]
        deadline_ms = rng.uniform(50.0, 5000.0) if rng.random() < 0.1 else None
        out.append((key, weight, priority, work_class, deadline_ms))
    return out


def saturated(make: Callable[[int], Any], stream: list[Params], ops: int) -> float:
    sched = make(8)
    mask = len(stream) - 1
    for i in range(520):
        key, weight, priority, work_class, deadline_ms = stream[i & mask]
        sched.enqueue(sched.ticket(key, weight, priority, work_class, 0.0, deadline_ms))
    running = deque(sched.admit_ready())
    release, popleft, extend = sched.release, running.popleft, running.extend
    ticket, enqueue, admit_ready = sched.ticket, sched.enqueue, sched.admit_ready
    t0 = time.perf_counter()
    for i in range(ops):
        release(popleft())
        key, weight, priority, work_class, deadline_ms = stream[i & mask]
        enqueue(ticket(key, weight, priority, work_class, i * 0.001, deadline_ms))
        extend(admit_ready())
    elapsed = time.perf_counter() - t0
    assert sched.running == 8 and sched.waiting == 512
    return elapsed


def idle(make: Callable[[int], Any], stream: list[Params], ops: int) -> float:
    sched = make(8)
    mask = len(stream) - 1
    release, ticket, enqueue, admit_ready = sched.release, sched.ticket, sched.enqueue, sched.admit_ready
    t0 = time.perf_counter()
    for i in range(ops):
        key, weight, priority, work_class, deadline_ms = stream[i & mask]
        t = ticket(key, weight, priority, work_class, i * 0.001, deadline_ms)
        enqueue(t)
        admit_ready()
        release(t)
    elapsed = time.perf_counter() - t0
    assert sched.running == 0 and sched.waiting == 0
    return elapsed


def measure(ops: int, repeat: int) -> dict[str, Any]:
    stream = request_stream(4096)
    impls: dict[str, Callable[[int], Any]] = {"cython": blazar_sched.Scheduler, "python-heapq": HeapScheduler}
    results: dict[str, Any] = {}
    for name, scenario in (("saturated", saturated), ("idle", idle)):
        best = dict.fromkeys(impls, float("inf"))
        ratios = []
        for _ in range(repeat):
            took = {}
            for impl, make in impls.items():
                gc.collect()
                took[impl] = scenario(make, stream, ops)
                best[impl] = min(best[impl], took[impl])
            ratios.append(took["python-heapq"] / took["cython"])
        ops_s = {impl: ops / t for impl, t in best.items()}
        results[name] = {
            "ops_per_s": {k: round(v) for k, v in ops_s.items()},
            "us_per_op": {k: round(1e6 / v, 3) for k, v in ops_s.items()},
            "ratio": round(statistics.median(ratios), 2),
            "ratio_min": round(min(ratios), 2),
        }
    return {
        "ops": ops,
        "repeat": repeat,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "results": results,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=200_000, help="operations per round and implementation")
    ap.add_argument("--repeat", type=int, default=7, help="rounds, each running both implementations")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    report = measure(args.ops, args.repeat)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"admit+release, {args.ops} ops x {args.repeat} rounds, Python {report['python']}; ratio = median")
    print(f"{'scenario':<10} {'cython ops/s':>14} {'python ops/s':>14} {'ratio':>7} {'worst':>7}")
    for name, r in report["results"].items():
        ops_s = r["ops_per_s"]
        print(
            f"{name:<10} {ops_s['cython']:>14,} {ops_s['python-heapq']:>14,}"
            f" {r['ratio']:>6.2f}x {r['ratio_min']:>6.2f}x"
        )


if __name__ == "__main__":
    main()
