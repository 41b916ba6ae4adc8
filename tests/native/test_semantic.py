"""Native semantic index: exact top-1 cosine against numpy-free brute force, threshold,
partitions, TTL, capacity eviction, input forms, concurrency with the GIL released."""

from __future__ import annotations

import math
import random
import struct
import threading
import time

import pytest

from blazar import _native


def unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(unit(a), unit(b), strict=True))


def test_top1_matches_brute_force() -> None:
    rng = random.Random(3)
    dim = 24
    index = _native.SemanticIndex(dim, 5000, math.inf, threshold=0.3)
    rows = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(600)]
    for i, row in enumerate(rows):
        index.insert("p", row, str(i).encode())
    for _ in range(60):
        base = rows[rng.randrange(len(rows))]
        q = [x + rng.gauss(0, 0.8) for x in base]
        scores = [cosine(q, r) for r in rows]
        best = max(range(len(rows)), key=scores.__getitem__)
        hit = index.lookup("p", q)
        if scores[best] < 0.3:
            assert hit is None or hit[0] >= 0.3 - 1e-5
            continue
        assert hit is not None
        score, value = hit
        assert score == pytest.approx(scores[best], abs=1e-5)
        assert scores[int(value)] == pytest.approx(scores[best], abs=1e-5)


def test_threshold_partitions_bytes_vectors() -> None:
    index = _native.SemanticIndex(3, 10, 60.0)
    assert (index.dim, index.capacity, index.ttl_secs, index.threshold) == (3, 10, 60.0, pytest.approx(0.9))
    index.insert("m|key|lane", struct.pack("<3f", 1.0, 0.0, 0.0), b"answer")
    hit = index.lookup("m|key|lane", [10.0, 1.0, 0.0])
    assert hit is not None and hit[1] == b"answer" and hit[0] == pytest.approx(10 / math.sqrt(101), abs=1e-6)
    assert index.lookup("m|other|lane", [1.0, 0.0, 0.0]) is None
    assert index.lookup("m|key|lane", [1.0, 1.0, 0.0]) is None
    assert len(index) == 1


def test_capacity_evicts_oldest() -> None:
    index = _native.SemanticIndex(2, 2, math.inf, threshold=0.99)
    index.insert("a", [1.0, 0.0], b"1")
    index.insert("b", [0.0, 1.0], b"2")
    index.insert("a", [-1.0, 0.0], b"3")
    assert len(index) == 2
    assert index.lookup("a", [1.0, 0.0]) is None
    assert index.lookup("b", [0.0, 1.0]) == (pytest.approx(1.0), b"2")


def test_expired_entries_are_ignored_and_evicted() -> None:
    index = _native.SemanticIndex(2, 10, 0.001)
    index.insert("p", [1.0, 0.0], b"v")
    # The passing of time is the point (the index has no clock to inject), and this cannot race: the sleep lasts
    # at least 10 ms on the monotonic clock the index reads, ten times the entry's 1 ms life.
    time.sleep(0.01)
    assert index.lookup("p", [1.0, 0.0]) is None
    assert len(index) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 1, 1.0), "dim and capacity"),
        ((2, 0, 1.0), "dim and capacity"),
        ((2, 1, 0.0), "ttl_secs"),
        ((2, 1, math.nan), "ttl_secs"),
        ((2, 1, 1.0, 1.5), "threshold"),
    ],
)
def test_bad_arguments(args: tuple[float, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _native.SemanticIndex(*args)  # type: ignore[arg-type]


def test_bad_vectors() -> None:
    index = _native.SemanticIndex(2, 4, 1.0)
    with pytest.raises(ValueError, match="3 dimensions, the index has 2"):
        index.insert("p", [1.0, 2.0, 3.0], b"")
    with pytest.raises(ValueError, match="zero, infinite or NaN"):
        index.insert("p", [0.0, 0.0], b"")
    with pytest.raises(ValueError, match="multiple of 4 bytes"):
        index.lookup("p", b"\x00" * 7)
    with pytest.raises(TypeError):
        index.lookup("p", "ab")  # type: ignore[arg-type]


def test_threads_search_concurrently() -> None:
    dim = 64
    index = _native.SemanticIndex(dim, 10_000, math.inf, threshold=0.5)
    rng = random.Random(1)
    rows = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(2000)]
    for i, row in enumerate(rows):
        index.insert("p", row, str(i).encode())
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        r = random.Random(seed)
        try:
            for _ in range(50):
                i = r.randrange(len(rows))
                hit = index.lookup("p", rows[i])
                assert hit is not None and hit[0] == pytest.approx(1.0, abs=1e-5)
                if r.random() < 0.2:
                    index.insert("q", rows[i], b"x")
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
