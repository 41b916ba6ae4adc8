"""Where Blazar keeps things under its data dir; it owns path layout only, never creates content."""

from __future__ import annotations

import contextlib
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from blazar.errors import ConfigError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def cache_dir() -> Path:
    """The user's cache for what any data directory may reuse (downloads, engine builds): ``$BLAZAR_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/blazar``, else ``~/.cache/blazar``; the test assets live there too."""
    env = os.environ.get("BLAZAR_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "blazar"


def safe_component(name: str) -> str:
    """A file-system-safe rendering of a model or engine name ('org/m:tag' -> 'org--m--tag')."""
    return _UNSAFE.sub("--", name).strip(".") or "_"


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (the data dir names staging folders and child files after processes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits to be reaped (a daemon killed a moment ago, before init reaps it):
    state Z in ``/proc/PID/stat``, after the parenthesised command name."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z"


TOKENS_SUFFIX = "@tokens"
EMBED_SUFFIXES = ("@embed", TOKENS_SUFFIX)
"""The key suffixes of a model's embedding children: pooled embeddings, and late chunking's per-token ones."""


def child_key(name: str, embeddings: bool, tokens: bool = False) -> str:
    """The key of the engine child serving catalog model ``name``: embeddings run in their own ``@embed`` one,
    late chunking's per-token embeddings (``--pooling none``) in ``@tokens``."""
    if tokens:
        return name + TOKENS_SUFFIX
    return name + "@embed" if embeddings else name


MAX_REPLICAS = 16
"""The most engines of one model a host runs (``replicas``)."""
REPLICA_MARK = "#"


def instance_key(key: str, replica: int) -> str:
    """The key of a model's ``replica``-th engine instance: its chat engine's key for the first (0), then
    ``name#1``, ``name#2``, ..."""
    return key if replica == 0 else f"{key}{REPLICA_MARK}{replica}"


def replica_of(key: str) -> tuple[str, int]:
    """(the model's engine key, the instance number) of an instance key; (``key``, 0) for any other key."""
    base, mark, n = key.rpartition(REPLICA_MARK)
    return (base, int(n)) if mark and n.isdigit() else (key, 0)


def child_keys(name: str) -> tuple[str, ...]:
    """Every engine key catalog model ``name`` may run under: chat (and its replicas), pooled embeddings,
    per-token embeddings."""
    replicas = (instance_key(name, i) for i in range(1, MAX_REPLICAS))
    return (name, *replicas, *(name + suffix for suffix in EMBED_SUFFIXES))


@dataclass(frozen=True, slots=True)
class DataDir:
    """The data dir layout: blazar.db, models/, engines/, run/, logs/, sessions/, speccache/, audit/, blobs/."""

    root: Path

    @property
    def db(self) -> Path:
        return self.root / "blazar.db"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def engines(self) -> Path:
        return self.root / "engines"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def daemon_log(self) -> Path:
        """The daemon's own log (``blazar log`` reads it), written by every ``blazar serve`` however started."""
        return self.logs / "blazar.log"

    def ensure(self) -> DataDir:
        try:
            for p in (self.root, self.models, self.engines, self.run, self.logs):
                p.mkdir(parents=True, exist_ok=True)
            self.run.chmod(0o700)  # the engines' API key files and unix sockets: this user's only
        except OSError as e:
            where = e.filename or self.root
            if isinstance(e, FileExistsError):
                why = f"{where} is a file, not a directory"
            elif isinstance(e, NotADirectoryError):
                why = f"a part of {where} is a file, not a directory"
            else:
                why = f"{where}: {e.strerror or e}"
            raise ConfigError(
                f"data directory {self.root} cannot be used: {why}; set data_dir in config.toml or"
                " BLAZAR_DATA_DIR to a directory this user can write"
            ) from None
        return self

    def run_file(self, model: str, suffix: str) -> Path:
        return self.run / f"{safe_component(model)}.{suffix}"

    def child_file(self, key: str, suffix: str) -> Path:
        """This daemon's file for its engine child ``key``: ``run/<key>.<daemon pid>.<suffix>`` (its pid, its API
        key), so daemons sharing a data directory never overwrite or delete each other's."""
        return self.run / f"{safe_component(key)}.{os.getpid()}.{suffix}"

    def sweep_run(self) -> list[int]:
        """Remove the child files of daemons that are gone (killed before they could remove them), first stopping
        the engines they name that outlived them (SIGKILL; an engine is known by its command line, which names
        this run directory: its key file, its socket). Returns the pids of the engines stopped."""
        stopped = []
        for f in self.run.glob("*.*.*") if self.run.is_dir() else []:
            _key, daemon, suffix = f.name.rsplit(".", 2)
            if suffix not in ("pid", "apikey") or not daemon.isdigit() or alive(int(daemon)):
                continue
            if suffix == "pid" and (orphan := self._orphan(f)) is not None:
                with contextlib.suppress(OSError):
                    os.kill(orphan, signal.SIGKILL)
                    stopped.append(orphan)
            f.unlink(missing_ok=True)
        return stopped

    def _orphan(self, pid_file: Path) -> int | None:
        """The live engine a dead daemon's pid file names, or None (gone, or a process that is not one of ours)."""
        try:
            pid = int(pid_file.read_text().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, ValueError):
            return None
        return pid if str(self.run).encode() in cmdline else None

    def bank(self, model: str) -> Path:
        """Where ``model``'s engines save their slots (``supervisor.bank``)."""
        return self.root / "sessions" / safe_component(model)

    def log_file(self, model: str) -> Path:
        return self.logs / f"{safe_component(model)}.log"

    def redact(self, text: str) -> str:
        """``text`` (an engine log, an error) with this data directory's path written as ``<data dir>``, for what
        a client sees: where the models, engines and keys live is the server's business."""
        return text.replace(str(self.root), "<data dir>")

    def log_name(self, model: str) -> str:
        """The engine log as client-facing messages name it: relative to the data directory, so an HTTP error
        body never carries the server's absolute paths."""
        return f"logs/{safe_component(model)}.log in blazar's data directory"
