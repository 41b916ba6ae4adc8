"""Native streaming core against pure-Python baselines, each a ratio measured in one run.

  stream    parse + translate a 10,000-chunk recorded llama-server stream (the ``text`` fixture's
            content events repeated, with its real head and ending), one ``feed`` per event as a
            token-by-token engine delivers it: ``blazar._native.StreamTranslator`` against the
            Python oracle ``tests/oracle/translate.py`` (same bytes out), per client dialect.
            Target: at least 10x.
  gguf      metadata of the SmolLM2-135M GGUF file: ``blazar._native.read_gguf_metadata``
            against ``gguf.GGUFReader`` from PyPI (installed into this venv if missing, as is
            numpy for the semantic bench); the
            native call also with ``max_array_len`` large enough to materialise the whole
            tokenizer, as GGUFReader does. Target: at least 20x.
  semantic  top-1 cosine over 100,000 x 384 float32 vectors: ``SemanticIndex.lookup`` against
            numpy brute force (``matrix @ query``, ``argmax``, threshold) on the same normalised
            vectors, for queries that hit (a stored vector plus noise) and that miss (random).
            Target: at least 2x and under 5 ms.

Each scenario runs ``--repeat`` rounds, native and baseline back to back; reported are the best
round of each and the median of the per-round ratios.

Usage: python benches/bench_native.py [--only stream,gguf,semantic] [--repeat R] [--json]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.native.streams import DIALECTS, long_stream  # noqa: E402
from tests.oracle import translate as oracle  # noqa: E402

from blazar import _native  # noqa: E402


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def paired(native: Callable[[], object], baseline: Callable[[], object], repeat: int) -> dict[str, float]:
    ns, bs = [], []
    for _ in range(repeat):
        ns.append(timed(native))
        bs.append(timed(baseline))
    ratios = [b / n for n, b in zip(ns, bs, strict=True)]
    return {
        "native_s": min(ns),
        "baseline_s": min(bs),
        "ratio_median": statistics.median(ratios),
        "ratio_worst": min(ratios),
    }


def bench_stream(repeat: int) -> dict[str, Any]:
    stream = long_stream(10_000)
    events = [e + b"\n\n" for e in stream.split(b"\n\n") if e]
    assert len(events) == 10_000

    def drive(factory: Callable[..., Any], dialect: str) -> Callable[[], bytes]:
        def run() -> bytes:
            tr = factory(dialect, "smollm2:135m", start_ns=0, message_id="msg_bench")
            out = [tr.feed(e, 0) for e in events]
            out.append(tr.finish(0))
            tr.summary()
            return b"".join(out)

        return run

    results: dict[str, Any] = {"chunks": len(events), "bytes": len(stream)}
    for dialect in DIALECTS:
        native, baseline = drive(_native.StreamTranslator, dialect), drive(oracle.StreamTranslator, dialect)
        assert native() == baseline(), f"{dialect}: native and oracle disagree"
        r = paired(native, baseline, repeat)
        r["native_us_per_chunk"] = r["native_s"] / len(events) * 1e6
        r["baseline_us_per_chunk"] = r["baseline_s"] / len(events) * 1e6
        results[dialect] = r
    return results


def ensure(module: str) -> Any:
    """Imports ``module``, installing the PyPI package of that name into this venv if missing."""
    try:
        return importlib.import_module(module)
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", module], check=True)
        return importlib.import_module(module)


def model_path() -> Path:
    manifest = Path.home() / ".cache" / "blazar" / "assets.json"
    return Path(json.loads(manifest.read_text())["model"])


def bench_gguf(repeat: int) -> dict[str, Any]:
    gguf = ensure("gguf")
    path = model_path()

    def baseline() -> object:
        reader = gguf.GGUFReader(str(path))
        return {f.name: f.contents() for f in reader.fields.values()}, len(reader.tensors)

    default = paired(lambda: _native.read_gguf_metadata(path), baseline, repeat)
    full = paired(lambda: _native.read_gguf_metadata(path, max_array_len=1 << 30), baseline, repeat)
    return {
        "file_mib": path.stat().st_size / 2**20,
        "gguf_version": getattr(gguf, "__version__", None) or importlib.metadata.version("gguf"),
        "native_default": default,
        "native_full_arrays": full,
    }


def bench_semantic(repeat: int, n: int = 100_000, dim: int = 384, queries: int = 50) -> dict[str, Any]:
    np = ensure("numpy")
    rng = np.random.default_rng(42)
    matrix = rng.standard_normal((n, dim), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    index = _native.SemanticIndex(dim, n, math.inf, threshold=0.9)
    for i, row in enumerate(matrix):
        index.insert("model|key|lane", row.tobytes(), i.to_bytes(4, "little"))
    picks = rng.integers(0, n, queries)
    hits = matrix[picks] + rng.standard_normal((queries, dim), dtype=np.float32) * 0.01
    misses = rng.standard_normal((queries, dim), dtype=np.float32)
    results: dict[str, Any] = {"vectors": n, "dim": dim, "numpy": np.__version__}
    for name, qs in (("hit", hits), ("miss", misses)):
        qs = qs / np.linalg.norm(qs, axis=1, keepdims=True)
        q_bytes = [q.tobytes() for q in qs]

        def numpy_top1(q: Any) -> tuple[float, int] | None:
            scores = matrix @ q
            best = int(np.argmax(scores))
            return (float(scores[best]), best) if scores[best] >= 0.9 else None

        for q, qb in zip(qs, q_bytes, strict=True):
            want, got = numpy_top1(q), index.lookup("model|key|lane", qb)
            assert (want is None) == (got is None), (want, got)
            if want is not None and got is not None:
                assert abs(want[0] - got[0]) < 1e-4

        def native_all(q_bytes: list[bytes] = q_bytes) -> None:
            for qb in q_bytes:
                index.lookup("model|key|lane", qb)

        def numpy_all(qs: Any = qs) -> None:
            for q in qs:
                numpy_top1(q)

        r = paired(native_all, numpy_all, repeat)
        r["native_ms_per_query"] = r["native_s"] / queries * 1e3
        r["baseline_ms_per_query"] = r["baseline_s"] / queries * 1e3
        results[name] = r
    return results


BENCHES = {"stream": bench_stream, "gguf": bench_gguf, "semantic": bench_semantic}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", default=",".join(BENCHES))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    for name in args.only.split(","):
        out[name] = BENCHES[name](args.repeat)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if "stream" in out:
        s = out["stream"]
        print(f"stream: {s['chunks']} chunks, {s['bytes']} bytes, one feed per chunk")
        for d in DIALECTS:
            r = s[d]
            print(
                f"  {d:16} native {r['native_us_per_chunk']:6.2f} us/chunk  oracle {r['baseline_us_per_chunk']:7.2f}"
                f" us/chunk  ratio {r['ratio_median']:6.1f}x (worst {r['ratio_worst']:.1f}x)"
            )
    if "gguf" in out:
        g = out["gguf"]
        print(f"gguf: {g['file_mib']:.1f} MiB file, gguf {g['gguf_version']}")
        for key in ("native_default", "native_full_arrays"):
            r = g[key]
            print(
                f"  {key:18} native {r['native_s'] * 1e3:8.2f} ms  GGUFReader {r['baseline_s'] * 1e3:8.1f} ms"
                f"  ratio {r['ratio_median']:7.1f}x (worst {r['ratio_worst']:.1f}x)"
            )
    if "semantic" in out:
        m = out["semantic"]
        print(f"semantic: {m['vectors']} x {m['dim']} float32, numpy {m['numpy']}")
        for key in ("hit", "miss"):
            r = m[key]
            print(
                f"  {key:5} native {r['native_ms_per_query']:6.2f} ms/query  numpy {r['baseline_ms_per_query']:6.2f}"
                f" ms/query  ratio {r['ratio_median']:5.1f}x (worst {r['ratio_worst']:.1f}x)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
