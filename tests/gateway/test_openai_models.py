"""`/v1/models` objects: ``created`` is the import time in Unix seconds whatever the server's time zone."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from blazar.catalog.models import ModelRow
from blazar.gateway.openai import _model_object


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/New_York"])
def test_created_is_utc_seconds_in_any_time_zone(monkeypatch: pytest.MonkeyPatch, zone: str) -> None:
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        row = ModelRow(
            "m:latest", Path("m.gguf"), "gguf", 1, None, None, None, None, False, "2026-11-30T15:03:14+00:00"
        )
        want = int(datetime(2026, 11, 30, 15, 3, 14, tzinfo=UTC).timestamp())
        assert _model_object(row, ["completion"])["created"] == want == 1796050994
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
