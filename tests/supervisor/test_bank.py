"""``bank.prune``: the session bank stays under its cap across every model's folder, oldest banks first, and
leaves files that are not banks alone."""

from __future__ import annotations

import os
from pathlib import Path

from blazar.supervisor import bank


def _bank(folder: Path, name: str, size: int, age: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"\0" * size)
    os.utime(path, (1_000_000 + age, 1_000_000 + age))
    return path


def test_prune_removes_the_oldest_banks_of_any_model_until_under_the_cap(tmp_path: Path) -> None:
    old = _bank(tmp_path / "a--latest", "_auto-4096-0123456789ab-0.bin", 400, age=1)
    mid = _bank(tmp_path / "b--latest", "_auto-2048-0123456789ab-1.bin", 400, age=2)
    new = _bank(tmp_path / "a--latest", "_auto-4096-ba9876543210-0.bin", 400, age=3)
    named = _bank(tmp_path / "a--latest", "my-session.bin", 5000, age=0)  # a named save: not the bank's
    bank.prune(tmp_path, cap=900)
    assert not old.exists() and mid.exists() and new.exists() and named.exists()
    bank.prune(tmp_path, cap=400)
    assert not mid.exists() and new.exists() and named.exists()
    bank.prune(tmp_path / "absent", cap=0)  # no sessions folder yet: nothing to do
