"""Memory hygiene of the native streaming core: a child interpreter under PYTHONMALLOC=debug
(which checks every Python allocation for overruns and misuse) drives translators, parsers,
whole-body translation, error paths and the semantic index in a loop; its RSS may not keep
growing (orjson's test/test_memory.py is the model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import gc, json, math, resource, sys, time
    from blazar import _native
    from tests.native.streams import CASES, DIALECTS

    def rss_kib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() // 1024

    index = _native.SemanticIndex(64, 500, math.inf, threshold=0.5)

    def one_round(r):
        for case in CASES:
            for dialect in (*DIALECTS, "responses"):
                tr = _native.StreamTranslator(dialect, "m", include_usage=bool(r % 2))
                data = case.stream
                step = 1 + r % 97
                for i in range(0, len(data), step):
                    tr.feed(data[i:i + step])
                tr.finish()
                tr.summary()
                _native.translate_whole(dialect, "m", case.whole, message_id="msg_x")
            p = _native.SseParser()
            p.feed(case.stream)
            p.finish()
        tr = _native.StreamTranslator("anthropic", "m")
        try:
            tr.feed(b"data: " + b"x" * (4 << 20) + b"\\n")
        except _native.StreamError:
            pass
        tr.finish()
        try:
            _native.translate_whole("openai", "m", b"not json")
        except _native.StreamError:
            pass
        for k in range(50):
            v = [math.sin(r * 50 + k + j) for j in range(64)]
            index.insert(f"p{k % 3}", v, b"value" * 20)
            index.lookup(f"p{k % 3}", v)

    for r in range(int(sys.argv[1])):
        one_round(r)
    gc.collect()
    before = rss_kib()
    deadline = time.monotonic() + float(sys.argv[2])
    rounds = 0
    while time.monotonic() < deadline or rounds < 3:
        one_round(rounds)
        rounds += 1
    gc.collect()
    print(json.dumps({"before_kib": before, "after_kib": rss_kib(), "rounds": rounds}))
    """
)


def test_rss_does_not_grow_under_debug_allocator() -> None:
    env = {**os.environ, "PYTHONMALLOC": "debug", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-X", "dev", "-c", CHILD, "3", "8"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    growth = result["after_kib"] - result["before_kib"]
    assert result["rounds"] >= 3
    assert growth < 8 * 1024, f"RSS grew {growth} KiB over {result['rounds']} rounds: {result}"
