"""The Hub client over real HTTP against a local server laid out like the Hub: listings, metadata, resumable
verified downloads, refusals and cancellation."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from blazar.hub.client import Hub, HubCancelled, HubError, HubFile
from tests.fakehub import COMMIT, FakeHub, running, tiny_gguf

REPO = "org/tiny-GGUF"
FILE = "tiny-Q4_K_M.gguf"
DATA = tiny_gguf(floats=3 << 18)  # 3 MiB
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def fake() -> Iterator[FakeHub]:
    hub = FakeHub()
    hub.add(REPO, FILE, DATA)
    hub.add(REPO, "README.md", b"# tiny\n")
    with running(hub):
        yield hub


@pytest.fixture
def hub(fake: FakeHub) -> Iterator[Hub]:
    with Hub(fake.url, retries=2, backoff=0.01) as h:
        yield h


def _file(hub: Hub) -> HubFile:
    return next(f for f in hub.repo_info(REPO).files if f.path == FILE)


def test_listing_and_metadata(hub: Hub, fake: FakeHub) -> None:
    info = hub.repo_info(REPO)
    assert info.revision == COMMIT
    gguf = _file(hub)
    blob = fake.repos[REPO][FILE]
    assert (gguf.size, gguf.sha256) == (blob.size, blob.sha256)
    readme = next(f for f in info.files if f.path == "README.md")
    assert readme.sha256 is None and readme.size == 7
    # HEAD on resolve: the LFS sha256 and size ride on the redirect, which is not followed.
    assert hub.file_info(REPO, FILE) == HubFile(FILE, blob.size, blob.sha256)
    assert hub.file_info(REPO, "README.md").sha256 is None  # a git blob's ETag is no sha256
    assert hub.url(REPO, "sub dir/x.gguf", "main").endswith("/org/tiny-GGUF/resolve/main/sub%20dir/x.gguf")


def test_download_verified_and_renamed(hub: Hub, fake: FakeHub, tmp_path: Path) -> None:
    seen: list[tuple[int, int | None]] = []
    got = hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE, progress=lambda d, t: seen.append((d, t)))
    assert got.path == tmp_path / FILE and got.path.read_bytes() == DATA
    assert got.sha256 == SHA  # what the bytes hashed to on the way in, which the Hub's LFS sha256 confirmed
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE]  # no .part, .part.json or .lock left
    assert seen[-1] == (len(DATA), len(DATA))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_a_verified_leftover_is_reused_and_a_stale_one_replaced(
    hub: Hub, fake: FakeHub, tmp_path: Path
) -> None:
    (tmp_path / FILE).write_bytes(DATA)
    assert hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE).sha256 == SHA
    assert fake.ranges(FILE) == []
    (tmp_path / FILE).write_bytes(bytes(len(DATA)))  # same size, other bytes
    assert hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE).path.read_bytes() == DATA
    assert fake.ranges(FILE) == [None]


def test_dropped_connections_resume_with_range(hub: Hub, fake: FakeHub, tmp_path: Path) -> None:
    fake.drops[FILE] = [1_000_000, 2_500_000]
    got = hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE)
    assert got.path.read_bytes() == DATA and got.sha256 == SHA
    assert fake.ranges(FILE) == [None, "bytes=1000000-", "bytes=2500000-"]


def test_interrupted_pull_is_resumed_by_the_next(hub: Hub, fake: FakeHub, tmp_path: Path) -> None:
    fake.drops[FILE] = [1_200_000] * 4  # more cuts than retries: every try stops at the same byte
    with pytest.raises(HubError, match=r"failed after 3 tries .* 1200000 bytes are kept"):
        hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE)
    part = tmp_path / f"{FILE}.part"
    assert part.stat().st_size == 1_200_000 and not (tmp_path / FILE).exists()
    fake.drops.clear()
    fake.requests.clear()
    seen: list[int] = []
    got = hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE, progress=lambda d, t: seen.append(d))
    assert got.path.read_bytes() == DATA and not part.exists()
    assert got.sha256 == SHA  # the digest covers the kept prefix too
    assert fake.ranges(FILE) == ["bytes=1200000-"]
    assert seen[0] == 1_200_000  # the kept prefix is reported (and hashed) before new bytes arrive


def test_a_part_of_another_file_is_not_resumed(hub: Hub, fake: FakeHub, tmp_path: Path) -> None:
    (tmp_path / f"{FILE}.part").write_bytes(b"x" * 1000)
    (tmp_path / f"{FILE}.part.json").write_bytes(b'{"url":"elsewhere"}')
    assert hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE).path.read_bytes() == DATA
    assert fake.ranges(FILE) == [None]


def test_server_ignoring_range_restarts_cleanly(hub: Hub, fake: FakeHub, tmp_path: Path) -> None:
    fake.drops[FILE] = [1_000_000]
    fake.ignore_range = True
    assert hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE).path.read_bytes() == DATA


def test_a_file_the_hub_gives_no_sha256_for_gets_the_one_it_hashed_to(hub: Hub, tmp_path: Path) -> None:
    got = hub.download(REPO, COMMIT, HubFile(FILE, len(DATA), None), tmp_path / FILE)
    assert got.sha256 == SHA and got.path.read_bytes() == DATA


def test_sha256_mismatch_removes_the_download(hub: Hub, fake: FakeHub, tmp_path: Path) -> None:
    fake.corrupt.add(FILE)
    with pytest.raises(HubError, match=r"sha256 mismatch for tiny-Q4_K_M\.gguf: the Hub says") as e:
        hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE)
    assert "download was removed" in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_cancel_keeps_the_part(hub: Hub, tmp_path: Path) -> None:
    cancel = threading.Event()

    def progress(done: int, total: int | None) -> None:
        if done >= 1_000_000:
            cancel.set()

    with pytest.raises(HubCancelled, match="cancelled; the next pull resumes it"):
        hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE, progress=progress, cancel=cancel)
    assert (tmp_path / f"{FILE}.part").stat().st_size >= 1_000_000


def test_one_download_per_file_at_a_time(hub: Hub, tmp_path: Path) -> None:
    import fcntl

    with (tmp_path / f"{FILE}.lock").open("a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(HubError, match="another pull is already downloading") as e:
            hub.download(REPO, COMMIT, _file(hub), tmp_path / FILE)
    assert e.value.status == 409


def test_refusals_teach(hub: Hub, fake: FakeHub) -> None:
    with pytest.raises(HubError, match=r"model repo 'org/ghost' not found on http://127\.0\.0\.1") as e:
        hub.repo_info("org/ghost")
    assert e.value.status == 404 and "HF_TOKEN" in str(e.value)
    with pytest.raises(HubError, match="no such file in org/tiny-GGUF"):
        hub.file_info(REPO, "absent.gguf")
    with pytest.raises(HubError, match="invalid Hub repo id"):
        hub.repo_info("../etc")
    with pytest.raises(HubError, match="invalid file path"):
        hub.url(REPO, "../x.gguf", "main")
    with Hub("http://127.0.0.1:9", timeout=2) as dead, pytest.raises(HubError, match="cannot reach"):
        dead.repo_info(REPO)


def test_token_is_sent_and_never_shown(fake: FakeHub) -> None:
    fake.token = "hf_secret_value"
    with Hub(fake.url) as anon, pytest.raises(HubError, match="is gated: accept its terms") as e:
        anon.repo_info(REPO)
    assert e.value.status == 403
    with Hub(fake.url, "hf_wrong") as wrong, pytest.raises(HubError) as e:
        wrong.repo_info(REPO)
    assert "hf_wrong" not in str(e.value)
    with Hub(fake.url, "hf_secret_value") as good:
        assert good.repo_info(REPO).revision == COMMIT
    assert fake.requests[-1][3] == "Bearer hf_secret_value"
