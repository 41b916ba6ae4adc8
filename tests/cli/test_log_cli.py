"""`blazar log`: the daemon's own log file, written by a real `blazar serve`, read back filtered and followed by the
real command; the entry grouping, level and model filters and colours alone."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil

from blazar.cli.log import entries, keep, level_of, model_pattern, shown
from tests.conftest import HANG, Daemon, blazar_cmd, make_daemon, wait_for

LOG = [
    "2026-12-02 20:57:26,648 INFO blazar.engines: engine check: the Releases API could not be read",
    "2026-12-02 20:57:27,378 INFO blazar.supervisor: engine for smollm2:latest ready in 0.69s",
    "2026-12-02 20:57:30,393 WARNING blazar.sentinel: sentinel: smollm2 answered whole: [truncated]",
    "2026-12-02 20:57:31,000 ERROR blazar.gateway: unhandled error on POST /api/chat (trace t-1)",
    "Traceback (most recent call last):",
    '  File "x.py", line 1, in <module>',
    "2026-12-02 20:57:32,000 INFO blazar.supervisor: engine for smollm2x:latest ready in 0.5s",
    "2026-12-02 20:57:33,000 WARNING blazar.supervisor: engine for qwen:7b crashed",
]


@contextlib.contextmanager
def following(
    env: dict[str, str], *args: str
) -> Iterator[tuple[subprocess.Popen[str], list[str], threading.Thread]]:
    """``blazar log --follow ARGS`` running, its stdout lines gathered into the list as they come."""
    seen: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-m", "blazar", "log", "--follow", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as follow:
        out = follow.stdout
        assert out is not None
        reader = threading.Thread(target=lambda: seen.extend(iter(out.readline, "")), daemon=True)
        reader.start()
        yield follow, seen, reader


def test_entries_carry_their_traceback_and_filter_by_level_and_model() -> None:
    got = list(entries(LOG))
    assert len(got) == 6 and got[3].endswith("line 1, in <module>") and got[3].count("\n") == 2
    assert [level_of(e) for e in got if keep(e, "warning", None)] == ["WARNING", "ERROR", "WARNING"]
    smollm2 = model_pattern("smollm2")
    assert [i for i, e in enumerate(got) if keep(e, None, smollm2)] == [1, 2]  # not smollm2x, not qwen
    assert [i for i, e in enumerate(got) if keep(e, None, model_pattern("qwen:7b"))] == [5]
    assert not [e for e in got if keep(e, None, model_pattern("qwen"))]  # qwen:latest is another model
    assert "\x1b[" in shown(got[2], colour=True) and shown(got[2], colour=False) == got[2]
    assert shown(got[1], colour=True) == got[1]  # INFO stays plain


def test_the_daemon_writes_its_log_and_blazar_log_reads_and_follows_it(tmp_path: Path) -> None:
    d: Daemon = make_daemon(tmp_path / "d")
    missing = blazar_cmd("log", env=d.env, check=False)
    assert missing.returncode == 1 and "start the daemon with `blazar serve`" in missing.stderr
    d.start()  # no engine and no model: it says so, as warnings
    try:
        log = d.data_dir / "logs" / "blazar.log"
        assert log.stat().st_mode & 0o777 == 0o600
        every = blazar_cmd("log", env={**d.env, "NO_COLOR": "1"})
        assert "engine check" in every.stdout or "INFO" in every.stdout
        warnings = blazar_cmd("log", "--level", "warning", env=d.env).stdout
        assert warnings and all(" WARNING " in line or " ERROR " in line for line in warnings.splitlines()
                                if line[:4].isdigit())  # fmt: skip
        assert " INFO " not in warnings
        bad = blazar_cmd("log", "--level", "loud", env=d.env, check=False)
        assert bad.returncode == 1 and "--level must be one of debug, info" in bad.stderr
        with following(d.env, "--lines", "1") as (follow, seen, reader):
            try:
                wait_for(lambda: len(seen) >= 1, HANG, "blazar log --follow to print the last entry")
                before = len(seen)
                d.stop()  # what it logs as it stops reaches the follower
                wait_for(lambda: any("stopping: the listener is closed" in line for line in seen), HANG,
                         "blazar log --follow to print the daemon's stop")  # fmt: skip
            finally:
                follow.terminate()
                follow.wait(60)
                reader.join(60)
        assert before == 1  # --lines 1: the last entry, then only what came after
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.stop()


def test_follow_reads_the_running_daemons_events_where_its_file_is_not(tmp_path: Path) -> None:
    """--follow takes the daemon's /api/events (the records its file gets): a follower with another data dir, as
    on another host, prints what the daemon logs, and ends when the daemon's stream does."""
    d: Daemon = make_daemon(tmp_path / "d")
    d.start()
    elsewhere = {**d.env, "BLAZAR_DATA_DIR": str(tmp_path / "not-the-daemons"), "NO_COLOR": "1"}
    try:
        with following(elsewhere, "--lines", "0") as (follow, seen, reader):

            def connected() -> bool:
                conns = psutil.Process(follow.pid).net_connections(kind="tcp")
                return any(c.raddr and c.raddr.port == d.port and c.status == "ESTABLISHED" for c in conns)

            wait_for(connected, HANG, "blazar log --follow to open the daemon's event stream")
            d.stop()
            assert (
                follow.wait(HANG) == 0
            )  # the stream ended with the daemon, and there is no file to go on with
            reader.join(60)
            err = follow.stderr.read() if follow.stderr else ""
        assert any("stopping: the listener is closed" in line for line in seen), seen
        assert "the daemon's event stream ended" in err, err
        assert not (tmp_path / "not-the-daemons" / "logs").exists()
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.stop()
    # no daemon now, and the follower's data dir has no log: it says both, and what to run
    gone = blazar_cmd("log", "--follow", env=elsewhere, check=False)
    assert gone.returncode == 1 and "start the daemon with `blazar serve`" in gone.stderr
    assert f"no daemon answers at http://127.0.0.1:{d.port}" in gone.stderr, gone.stderr
