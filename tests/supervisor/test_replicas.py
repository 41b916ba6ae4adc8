"""``Instances``: which of a model's replicas a request runs on (pure bookkeeping)."""

from __future__ import annotations

from blazar.supervisor.replicas import Instances

KEY = "m:latest"


def test_a_second_instance_starts_only_when_every_slot_of_the_first_is_taken() -> None:
    inst = Instances()
    started: set[str] = set()
    with inst.take(KEY, 2, 3, started) as a:
        assert a == 0  # nothing runs: the first instance
        started.add(KEY)
        with inst.take(KEY, 2, 3, started) as b:
            assert b == 0  # a free slot on it
            with inst.take(KEY, 2, 3, started) as c:
                assert c == 1  # both taken: the next instance starts
                started.add(KEY + "#1")
                assert inst.load == {KEY: 2, KEY + "#1": 1}
        assert inst.choose(KEY, 2, 3, started) == 1  # the least loaded with a free slot (1 each: the lower)
    assert inst.load == {}
    assert inst.choose(KEY, 2, 3, started) == 0


def test_every_instance_full_goes_to_the_least_loaded() -> None:
    inst = Instances()
    inst.load = {KEY: 3, KEY + "#1": 2}
    assert inst.choose(KEY, 2, 2, {KEY, KEY + "#1"}) == 1


def test_a_pinned_session_keeps_its_instance() -> None:
    inst = Instances()
    started = {KEY, KEY + "#1"}
    inst.load = {KEY + "#1": 5}
    assert inst.choose(KEY, 2, 2, started, pinned=KEY + "#1") == 1  # its KV cache is there, however busy
    assert inst.choose(KEY, 2, 2, started, pinned="other:latest#1") == 0  # another model's pin: not this one
    assert inst.choose(KEY, 2, 2, started, pinned=KEY + "#5") == 0  # beyond the replicas now configured
