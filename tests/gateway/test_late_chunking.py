"""Late chunking's bound message (the whole path runs in tests/e2e/test_late_chunking.py)."""

from __future__ import annotations

from blazar.gateway.late_chunking import _too_long


def test_the_413_names_the_lever_that_binds() -> None:
    own = _too_long("300 tokens", 256, 256)
    assert own.status == 413 and own.kind == "request_too_large"
    assert (
        "(late_chunking_max_tokens is 256); send fewer or shorter chunks, or raise late_chunking_max_tokens"
        in (own.message)
    )
    slot = _too_long("300 tokens", 256, 4096).message
    assert "the model's context per slot is 256; late_chunking_max_tokens is 4096" in slot
    assert slot.endswith(
        "give the model more context per slot (ctx_size, or fewer parallel slots, in config.toml)"
    )
