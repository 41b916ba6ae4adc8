"""``blazar serve``: load config, open the store, check the port, and run the gateway with its supervisor.

It owns process-level setup (logging, the event loop policy, exit codes); serving is ``gateway.server``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import logging.handlers
import os
import sys
from pathlib import Path

import uvloop

from blazar.config import Config
from blazar.engines import registry
from blazar.gateway import blobs
from blazar.gateway.events import LogHandler
from blazar.gateway.server import EXIT_BIND_CONFLICT, BindConflict, check_port, run
from blazar.gateway.tenancy import Gate
from blazar.paths import DataDir
from blazar.store import QUICK_CHECK_SECS, Store
from blazar.supervisor import Supervisor

log = logging.getLogger("blazar.daemon")


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FILE_BYTES = 16 * 1024 * 1024
"""The daemon log rotates at 16 MiB (``blazar.log`` -> ``blazar.log.1``, two kept)."""


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=LOG_FORMAT,
        stream=sys.stderr,
    )
    if level != "debug":
        logging.getLogger("blazar.access").setLevel(logging.WARNING)
    # httpx logs every URL at INFO; signed download URLs and the like stay out of the daemon log.
    logging.getLogger("httpx").setLevel(logging.WARNING)


class _PrivateLog(logging.handlers.RotatingFileHandler):
    """A rotating log whose every file (the first, and each one rotation starts) is created 0600."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        return open(fd, "a", encoding=self.encoding, errors=self.errors)


def log_to_file(data: DataDir) -> None:
    """Every line the daemon logs also goes to ``logs/blazar.log`` (0600: it names keys, models and paths), which
    ``blazar log`` reads, whether the daemon runs in a terminal, under a service manager or in the background."""
    path = data.daemon_log
    try:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path, 0o600)  # one an earlier version left readable by others
        handler = _PrivateLog(path, maxBytes=LOG_FILE_BYTES, backupCount=2)
    except OSError as e:  # a read-only logs/: the terminal keeps the log
        log.warning("cannot write the daemon log %s: %s; blazar log will not show this run", path, e)
        return
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger().addHandler(handler)


def serve(cfg: Config, config_path: Path) -> int:
    setup_logging(cfg.log_level)
    try:
        check_port(cfg.host, cfg.port)
    except BindConflict as e:
        print(str(e), file=sys.stderr, flush=True)
        return EXIT_BIND_CONFLICT
    data = DataDir(cfg.data_dir).ensure()
    log_to_file(data)
    orphans = data.sweep_run()
    if orphans:  # a daemon killed before it could stop its engines left them running
        log.warning("stopped %d engine(s) an earlier daemon left running: pid %s", len(orphans), orphans)
    if (data.root / "blobs").is_dir():  # uploads a daemon killed mid-way left behind, and unused old blobs
        blobs.sweep(data.root / "blobs")
        blobs.prune(data.root / "blobs")
    # a lost catalog (an empty file beside model files) or a damaged one is refused, with the command that mends it
    store = Store.open(data.db, weights=data.models)
    try:
        if not store.quick_check():
            log.warning(
                "the start-up check of %s stopped after %.0f s; a damaged page will be found when it is read",
                data.db,
                QUICK_CHECK_SECS,
            )
    except BaseException:
        store.close()
        raise
    sup = Supervisor(cfg, data, store)
    sup.catalog.files.sweep_staging()  # what an import or quantization killed mid-way left
    for step in first_steps(store, sup):
        log.warning("%s", step)
    gate = Gate(cfg, store, data, config_path)
    logging.getLogger().addHandler(LogHandler(gate.events, LOG_FORMAT))  # the status page's log (/api/events)
    try:
        uvloop.run(run(cfg, sup, gate))
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
    return 0


def first_steps(store: Store, sup: Supervisor) -> list[str]:
    """What a daemon with nothing to serve says at start: the command for each missing part."""
    steps = []
    if not registry.list_all(store):
        steps.append(
            "no engine is installed, so no model can answer yet: build llama.cpp's llama-server with `blazar engine"
            " build --kind llama-cpp --source TARBALL|DIR` (the README's Quickstart fetches the source), or register"
            " one you have with `blazar engine add --kind llama-cpp --path /path/to/llama-server`"
        )
    if not sup.catalog.list():
        steps.append(
            "the catalog has no model yet: `blazar pull NAME` (hf:org/repo, or an alias such as qwen2.5:0.5b) or"
            " `blazar import FILE.gguf --name NAME` adds one"
        )
    return steps


__all__ = ["first_steps", "serve"]
