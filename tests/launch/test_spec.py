"""What a launch spec says about its engine beyond its command line (``launch/spec.py``)."""

from __future__ import annotations

from blazar.launch.spec import DEFAULT_UBATCH, LaunchSpec


def test_input_tokens_is_the_physical_batch_within_one_slot() -> None:
    def spec(argv: tuple[str, ...], per_slot: int) -> LaunchSpec:
        return LaunchSpec(argv, ctx_size=per_slot, kv_unified=True)

    assert spec(("llama-server", "-m", "x"), 4096).input_tokens == DEFAULT_UBATCH == 512
    # the last one wins, as in llama-server (a late-chunking engine's own comes after a model's extra_args)
    assert spec(("llama-server", "-ub", "64", "--ubatch-size", "300"), 4096).input_tokens == 300
    assert spec(("llama-server", "--ubatch-size", "300", "-ub", "64"), 4096).input_tokens == 64
    assert spec(("llama-server", "-ub", "2048"), 4096).input_tokens == 2048
    assert spec(("llama-server", "--ubatch-size", "8192"), 4096).input_tokens == 4096  # the slot caps it
    assert spec(("llama-server", "-ub", "many"), 0).input_tokens == 512  # unreadable: the default
    assert spec(("llama-server", "-ub"), 100).input_tokens == 100  # a flag with no value is ignored
    split = LaunchSpec(("llama-server", "-ub", "2048"), ctx_size=4096, parallel=4)  # 1024 per slot
    assert split.input_tokens == 1024
