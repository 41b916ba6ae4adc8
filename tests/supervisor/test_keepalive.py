"""An engine's keep-alive (``supervisor/keepalive.py``): its default per model, what a request's keep_alive does to
it, and the idle limit the idle loop and ``/api/ps`` read (the real unloads are in tests/e2e/test_ollama.py and test_supervision.py)."""

from __future__ import annotations

from blazar.config import Config
from blazar.config.model import ModelOverride
from blazar.supervisor.keepalive import KeepAlive


def test_defaults_come_from_the_model_or_the_whisper_setting() -> None:
    cfg = Config(whisper_idle_secs=900, models={"m:latest": ModelOverride(idle_timeout_secs=0)})
    assert KeepAlive.default_for(cfg, "other:latest", False).base is None  # the config's idle_timeout_secs
    assert KeepAlive.default_for(cfg, "other:latest", True).base == 900.0
    assert KeepAlive.default_for(cfg, "m:latest", False).base == -1.0  # 0: never
    assert KeepAlive.default_for(Config(whisper_idle_secs=0), "w:latest", True).base == -1.0
    assert KeepAlive.default_for(cfg, "other:latest", True).secs == 900.0  # in force until a request asks


def test_the_latest_request_by_arrival_wins_and_none_puts_back_the_models_own() -> None:
    keep = KeepAlive(base=600.0, secs=600.0)
    keep.ask(60.0, arrival=2.0)
    assert keep.secs == 60.0 and keep.asked() == 60.0
    keep.ask(-1.0, arrival=1.0)  # arrived before the one above (it waited for a slot): changes nothing
    assert keep.secs == 60.0
    keep.ask(None, arrival=3.0)
    assert keep.secs == 600.0 and keep.asked() is None  # the model's own is no request's keep_alive


def test_zero_unloads_when_idle_and_a_later_value_takes_that_back() -> None:
    keep = KeepAlive()
    keep.ask(0.0, arrival=1.0)
    assert keep.unload_when_idle and keep.secs is None  # the limit is untouched: the unload is the exchange's
    keep.ask(30.0, arrival=2.0)
    assert not keep.unload_when_idle and keep.secs == 30.0


def test_the_idle_limit_never_forever_or_the_daemons() -> None:
    assert KeepAlive().limit(300.0) == 300.0  # nothing asked: the daemon's idle_timeout_secs
    assert KeepAlive().limit(0.0) is None  # idle_timeout_secs = 0: never evicted
    assert KeepAlive(secs=-1.0).limit(300.0) is None  # a negative keep_alive: forever
    assert KeepAlive(secs=5.0).limit(0.0) == 5.0  # a request's limit holds under a daemon that never evicts
