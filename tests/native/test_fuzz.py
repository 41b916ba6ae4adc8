"""Bounded fuzz runs (atheris, libFuzzer-driven) of the native SSE parser and translators
(differential against the Python oracle), of the GGUF parser and of the engine relay's HTTP decoder, from the committed seed
corpora in native/fuzz/corpus/. Each target runs for FUZZ_SECONDS (default 12) on a scratch
copy of its corpus, so the committed corpus is only changed by hand."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "native" / "fuzz" / "corpus"
SECONDS = int(os.environ.get("FUZZ_SECONDS", "12"))

atheris = pytest.importorskip("atheris", reason="atheris (test extra) is not installed")


@pytest.mark.parametrize("target", ["sse", "gguf", "http"])
def test_fuzz_target(target: str, tmp_path: Path) -> None:
    corpus = tmp_path / target
    shutil.copytree(CORPUS / target, corpus)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.native.fuzz_targets",
            target,
            str(corpus),
            f"-max_total_time={SECONDS}",
            "-rss_limit_mb=4096",
            "-max_len=4096",
            f"-artifact_prefix={tmp_path}/",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=SECONDS + 120,
        check=False,
    )
    tail = proc.stderr[-4000:]
    assert proc.returncode == 0, tail
    assert "Done" in tail or "DONE" in tail, tail
