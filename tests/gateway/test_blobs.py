"""`gateway.blobs` on a real folder: which uploads the daemon's start removes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from blazar.gateway import blobs


def test_prune_removes_only_blobs_older_than_a_day(tmp_path: Path) -> None:
    old, new, other = (
        tmp_path / ("sha256-" + "a" * 64),
        tmp_path / ("sha256-" + "b" * 64),
        tmp_path / "keep.txt",
    )
    for f in (old, new, other):
        f.write_bytes(b"x")
    day_ago = time.time() - blobs.PRUNE_AFTER_SECS - 60
    os.utime(old, (day_ago, day_ago))
    os.utime(other, (day_ago, day_ago))
    assert blobs.prune(tmp_path) == [old.name]
    assert not old.exists() and new.exists() and other.exists()
    assert blobs.prune(tmp_path, now=time.time() + blobs.PRUNE_AFTER_SECS + 60) == [new.name]
