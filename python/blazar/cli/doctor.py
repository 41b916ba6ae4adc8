"""`blazar doctor`: what this machine and this Blazar look like, and every problem with its fix.

It checks the config, the hardware (GPUs through NVML, else CPU and RAM), the engines installed and active, the
models (file present, a serving lane, a launch profile that fits), the catalog database (lost, or damaged), the
port, and the data dir's free disk. It only reads: it never creates the data dir, installs, or starts anything,
except with ``--repair``, which rebuilds a lost or damaged catalog from the model files first (``repair``). Exit
status 1 when any check fails.
"""

from __future__ import annotations

import difflib
import errno
import os
import shutil
import socket
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import httpx
import orjson
import typer

from blazar.catalog.loras import Loras
from blazar.catalog.models import Catalog, ModelRow
from blazar.cli.common import console, fail
from blazar.config import Config, default_config_path, default_data_dir, load_config, load_config_text
from blazar.engines import registry
from blazar.engines.check import read_check
from blazar.engines.lanes import INSTALL_HINT, serving_lane
from blazar.engines.manifest import load_manifest
from blazar.engines.registry import EngineRow
from blazar.errors import BlazarError, ConfigError
from blazar.launch import hardware
from blazar.launch.hardware import Hardware, human_bytes
from blazar.launch.settings import fit_model, mmproj_for
from blazar.paths import DataDir
from blazar.store import REPAIR_HINT, Store, lost_catalog

REPAIR_FIX = (
    f"{REPAIR_HINT}: moves a damaged database aside and imports every model under models/ again by its file's"
    " name"
)
DISK_FAIL_BYTES = 1 << 30
DISK_WARN_BYTES = 5 << 30


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the report: ``status`` is "ok", "warn" or "fail"; ``fix`` says what to do about it."""

    name: str
    status: str
    detail: str
    fix: str | None = None


def check_config() -> tuple[Config, Check]:
    path = default_config_path()
    try:
        cfg = load_config()
    except ConfigError as e:
        try:  # the built-in defaults, with the environment's overrides (BLAZAR_HOST, _PORT, _DATA_DIR)
            fallback = load_config_text(None, path)
        except ConfigError:
            fallback = Config(data_dir=default_data_dir())
        return fallback, Check(
            "config",
            "fail",
            str(e),
            (
                "fix the BLAZAR_ variable it names (or unset it); the other checks below use the built-in defaults"
                if "BLAZAR_" in str(e) and str(path) not in str(e)
                else f"edit {path} (or unset BLAZAR_CONFIG); the other checks below use the built-in defaults"
            ),
        )
    where = str(path) if path.is_file() else f"{path} absent: built-in defaults"
    return cfg, Check("config", "ok", where)


def check_hardware(hw: Hardware) -> Check:
    ram = f"RAM {human_bytes(hw.ram_total)}, {human_bytes(hw.ram_available)} available"
    cpu = f"CPU {hw.cpu_model} ({hw.cpu_cores} cores, {hw.cpu_threads} threads)"
    if hw.gpus:
        gpus = "; ".join(
            f"GPU {g.index} {g.name} {human_bytes(g.total_bytes)}, {human_bytes(g.free_bytes)} free"
            for g in hw.gpus
        )
        return Check("hardware", "ok", f"{gpus}; driver {hw.driver}; {cpu}; {ram}")
    return Check("hardware", "ok", f"no NVIDIA GPU ({hw.gpu_note}); {cpu}; {ram}")


def check_engines(engines: list[EngineRow]) -> list[Check]:
    if not engines:
        return [
            Check(
                "engines",
                "fail",
                "no engine is installed, so no model can be served",
                INSTALL_HINT["llama-cpp"],
            )
        ]
    out = []
    by_kind: dict[str, list[EngineRow]] = {}
    for e in engines:
        by_kind.setdefault(e.kind, []).append(e)
    for kind, rows in by_kind.items():
        active = next((e for e in rows if e.active), None)
        tags = ", ".join(f"{e.tag}{'*' if e.active else ''}" for e in rows)
        if active is None:
            out.append(
                Check(
                    f"engine {kind}",
                    "warn",
                    f"installed {tags}; none active",
                    f"blazar engine use --kind {kind} TAG",
                )
            )
        else:
            out.append(
                Check(f"engine {kind}", "ok", f"{active.tag} active ({active.path}); installed {tags}")
            )
        for e in rows:
            if not e.path.is_file() or not os.access(e.path, os.X_OK):
                out.append(
                    Check(
                        f"engine {kind} {e.tag}",
                        "fail",
                        f"binary {e.path} is missing or not executable",
                        f"register a working binary: blazar engine add --kind {kind} --path BINARY",
                    )
                )
    return out


def check_updates(data: DataDir) -> list[Check]:
    """Engine updates the last check found (the daemon's background check, or `blazar engine check`); it never
    installs one."""
    found = read_check(data)
    if found is None:
        return []
    checked_at, lanes = found
    return [
        Check(
            f"update {s.kind}",
            "warn",
            f"{s.line()} (checked {checked_at})",
            f"blazar engine install --kind {s.kind} --version {s.newest}",
        )
        for s in lanes
        if s.update
    ]


def check_models(cfg: Config, models: list[ModelRow], engines: list[EngineRow], hw: Hardware) -> list[Check]:
    if not models:
        return [Check("models", "warn", "the catalog is empty", "blazar import PATH")]
    out = []
    for m in models:
        name = f"model {m.name}"
        if not m.path.is_file():
            out.append(
                Check(
                    name,
                    "fail",
                    f"weights file {m.path} is missing",
                    f"blazar rm {m.name}, then import it again",
                )
            )
            continue
        try:
            lane = serving_lane(cfg, m, engines)
            lane_text = f"{lane.kind} {lane.tag}"
        except BlazarError as e:
            out.append(Check(name, "warn", str(e)))
            continue
        try:
            result = fit_model(cfg, m, hardware=hw, mmproj=mmproj_for(cfg, m))
        except BlazarError as e:
            out.append(Check(name, "fail", str(e)))
            continue
        est = result.estimate
        if result.refusal is not None:
            out.append(
                Check(name, "fail", result.refusal, f"blazar show {m.name} --profile shows the estimate")
            )
            continue
        reduced = f", reduced from {est.requested_ctx} to fit" if est.reduced else ""
        out.append(
            Check(
                name,
                "ok",
                f"{lane_text}; ctx {est.ctx_size}{reduced}; needs {human_bytes(est.total)} of "
                f"{human_bytes(est.available)} ({est.placement})",
            )
        )
    return out


def check_config_names(cfg: Config, models: list[ModelRow], adapters: list[str]) -> list[Check]:
    """What config.toml names that the catalog lacks: a ``[models."NAME"]`` table or a key's ``models`` entry
    for no model (a typo is silently no override, or a key that can use nothing), and a ``chat_template_file``
    that is not there (the engine would fail to start)."""
    known = [m.name for m in models] + adapters
    out = []

    def missing(name: str) -> bool:
        return name not in known and not any(name.startswith(f"{r.name}:") for r in cfg.remotes)

    def hint(name: str) -> str:
        close = difflib.get_close_matches(name, known, n=1)
        return f"did you mean {close[0]}? " if close else ""

    for name, override in cfg.models.items():
        if known and missing(name):
            out.append(Check("config names", "warn", f'[models."{name}"] names no catalog model, so it applies to none',
                             f"{hint(name)}blazar ls lists the catalog"))  # fmt: skip
        path = override.chat_template_file
        if path is not None and not path.is_file():
            out.append(Check("config names", "fail", f'[models."{name}"] chat_template_file {path} is not a file',
                             "fix the path, or remove chat_template_file to use the model's own template"))  # fmt: skip
    for key in cfg.keys:
        for name in key.models:
            if known and missing(name):
                out.append(Check("config names", "warn", f"key '{key.name}' lists model '{name}', which is not in the"
                                 " catalog", f"{hint(name)}blazar ls lists the catalog"))  # fmt: skip
    return out


def _blazar_version_at(host: str, port: int) -> str | None:
    """The version a Blazar answering /healthz on ``host:port`` reports, or None when something else is there."""
    target = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    url = f"http://[{target}]:{port}/healthz" if ":" in target else f"http://{target}:{port}/healthz"
    try:
        r = httpx.get(url, timeout=2.0)
        body = r.json()
    except (httpx.HTTPError, ValueError):
        return None
    if r.status_code == 200 and isinstance(body, dict) and body.get("status") == "ok" and "version" in body:
        return str(body["version"])
    return None


def check_port(cfg: Config) -> Check:
    family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
    fix = "stop that program, or choose another port: port = N in config.toml, or BLAZAR_PORT=N"
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((cfg.host, cfg.port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                return Check(
                    "port",
                    "fail",
                    f"cannot bind {cfg.host}:{cfg.port}: {e.strerror}",
                    "set host in config.toml (or BLAZAR_HOST) to an address of this machine",
                )
        else:
            return Check("port", "ok", f"{cfg.host}:{cfg.port} is free")
    version = _blazar_version_at(cfg.host, cfg.port)
    if version is not None:
        return Check("port", "ok", f"{cfg.host}:{cfg.port} is served by a running blazar {version}")
    return Check("port", "fail", f"{cfg.host}:{cfg.port} is held by another program", fix)


def check_disk(data_dir: Path) -> Check:
    probe = data_dir
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError as e:
        return Check("disk", "fail", f"cannot read free space at {probe}: {e.strerror}")
    detail = f"{human_bytes(usage.free)} free of {human_bytes(usage.total)} for the data dir {data_dir}"
    fix = "free some space, or move data_dir (config.toml or BLAZAR_DATA_DIR) to a larger disk"
    if usage.free < DISK_FAIL_BYTES:
        return Check("disk", "fail", detail + " (under 1 GiB: models and logs cannot be written)", fix)
    if usage.free < DISK_WARN_BYTES:
        return Check("disk", "warn", detail + " (under 5 GiB: little room for models)", fix)
    return Check("disk", "ok", detail)


def check_writable(root: Path, db: Path) -> Check | None:
    """A fail when the data directory or its database exists but cannot be written (or is not what it should
    be): every import, copy, removal and key usage write would fail. None when they are fine, or not made yet."""
    fix = "make them writable by this user (chmod / chattr -i), or point data_dir (BLAZAR_DATA_DIR) elsewhere"
    if root.exists() and not root.is_dir():
        return Check(
            "store", "fail", f"the data directory {root} is not a directory", "move it aside, or " + fix
        )
    if db.exists() and not db.is_file():
        return Check(
            "store", "fail", f"the database {db} is not a file", f"move {db} aside; blazar recreates it"
        )
    for path in (root, db):
        if path.exists() and not _can_write(path):
            return Check("store", "fail", f"{path} cannot be written by this user", fix)
    return None


def _can_write(path: Path) -> bool:
    """Whether ``path`` (a directory: a file made in it) can really be written: ``os.access`` misses immutable
    files and read-only mounts."""
    try:
        if path.is_dir():
            probe = path / f".blazar-doctor-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        else:
            with path.open("r+b"):
                pass
    except OSError:
        return False
    return True


def run_checks(hw: Hardware | None = None) -> tuple[list[Check], Hardware]:
    cfg, cfg_check = check_config()
    hw = hw or hardware.probe()
    checks = [cfg_check, check_hardware(hw)]
    engines: list[EngineRow] = []
    models: list[ModelRow] = []
    adapters: list[str] = []
    data = DataDir(cfg.data_dir)
    writable = check_writable(data.root, data.db)
    if writable is not None:
        checks.append(writable)
    elif (lost := lost_catalog(data.db, data.models)) is not None:
        checks.append(Check("store", "fail", str(lost), REPAIR_FIX))
    elif data.db.is_file():
        try:
            with Store.open(data.db) as store:
                store.quick_check()  # every page read: a damaged file is named here, not at the first request
                engines = registry.list_all(store)
                catalog = Catalog(store, data)
                models = catalog.list()
                adapters = [a.name for a in Loras(catalog).list()]
        except BlazarError as e:
            checks.append(Check("store", "fail", str(e), REPAIR_FIX))
    checks += check_engines(engines)
    checks += check_updates(data)
    checks += check_models(cfg, models, engines, hw)
    checks += check_config_names(cfg, models, adapters)
    checks.append(check_port(cfg))
    checks.append(check_disk(cfg.data_dir))
    return checks, hw


def _db_files(db: Path) -> list[Path]:
    """The database and the WAL and shared-memory files SQLite keeps beside it."""
    return [db.with_name(db.name + suffix) for suffix in ("", "-wal", "-shm")]


def _aside(db: Path) -> Path:
    """Move a damaged database (with its WAL and shared-memory files) aside, never deleting it: it may still be
    read by hand. Returns where it went."""
    dest = db.with_name(f"{db.name}.damaged-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}")
    for part, moved in zip(_db_files(db), _db_files(dest), strict=True):
        if part.exists():
            os.replace(part, moved)
    return dest


def repair(data: DataDir) -> list[str]:
    """Rebuild a lost or damaged catalog from the files under ``models/``: a damaged database is moved aside,
    an empty one removed, and every model whose place no row names is imported again, by the name its place is
    written for (``ModelFiles.on_disk``). Returns what was done, one line each; a model that cannot be imported
    is named with why, and the rest go on. Keys' usage is not in the files and starts again at zero."""
    done: list[str] = []
    if data.db.is_file() and data.db.stat().st_size == 0:
        for part in _db_files(data.db):
            part.unlink(missing_ok=True)
        done.append(f"removed the empty database {data.db}")
    elif data.db.is_file():
        try:
            with Store.open(data.db) as store:
                store.quick_check()
        except BlazarError as e:
            done.append(f"moved the damaged database aside to {_aside(data.db)} ({e})")
    with Store.open(data.db) as store:
        catalog = Catalog(store, data)
        done += _import_found(catalog)
        adapters = {a.path for a in Loras(catalog).list()}
        for f in sorted((data.models / ".loras").glob("*.gguf")):
            if f not in adapters:
                done.append(f"a LoRA adapter's base is not kept with it: blazar lora add {f} --base MODEL")
        done += _unregistered_engines(data, {e.path for e in registry.list_all(store)})
    return done


def _import_found(catalog: Catalog) -> list[str]:
    """Import every model ``models/`` holds that no row names, by its place's name; one line for each."""
    done: list[str] = []
    kept = {m.path for m in catalog.list()}
    found, other = catalog.files.on_disk()
    for item in found:
        if item.path in kept:
            continue
        try:
            if item.path.is_file():
                catalog.import_file(item.path, item.name)
            elif shards := sorted(item.path.glob("*.gguf")):
                catalog.import_split(shards, item.name)
            else:
                catalog.import_dir(item.path, item.name)
        except (BlazarError, OSError) as e:
            done.append(f"not imported: {item.path}: {e}")
        else:
            done.append(f"imported {item.name} from {item.path}")
    return done + [f"left as it is: {path}: {why}" for path, why in other]


def _unregistered_engines(data: DataDir, registered: set[Path]) -> list[str]:
    """The engine binaries under ``engines/<kind>/<tag>/`` no row names, with the command that registers each."""
    manifest = load_manifest()
    done = []
    for binary in sorted(p for p in data.engines.glob("*/*/*") if p.is_file() and os.access(p, os.X_OK)):
        kind = binary.parent.parent.name
        try:
            expected = manifest.lane(kind).binary
        except BlazarError:  # not a kind this Blazar knows
            continue
        if binary not in registered and binary.name == expected:
            done.append(f"an engine is not registered: blazar engine add --kind {kind} --path {binary}")
    return done


def _repair_cmd() -> None:
    cfg = load_config()
    if (version := _blazar_version_at(cfg.host, cfg.port)) is not None:
        raise fail(
            f"a blazar {version} is serving on {cfg.host}:{cfg.port}: stop it first (Ctrl-C, or SIGTERM to its"
            " process), then run blazar doctor --repair again"
        )
    try:
        lines = repair(DataDir(cfg.data_dir).ensure())
    except BlazarError as e:
        raise fail(str(e)) from None
    for line in lines or ["nothing to repair: every model under models/ is in the catalog"]:
        console.print(f"repair: {line}", markup=False, highlight=False, soft_wrap=True)


_MARK = {"ok": "[green]ok[/green]  ", "warn": "[yellow]warn[/yellow]", "fail": "[red]FAIL[/red]"}


def doctor_cmd(
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
    repair_first: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Rebuild a lost or damaged catalog from the model files under models/ (stop the daemon first),"
            " then check.",
        ),
    ] = False,
) -> None:
    """Check the config, hardware, engines, models, port and disk; exit 1 when something is wrong."""
    if repair_first:
        _repair_cmd()
    checks, hw = run_checks()
    failed = [c for c in checks if c.status == "fail"]
    if json_out:
        report = {"ok": not failed, "checks": [asdict(c) for c in checks], "hardware": hw.to_json()}
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            console.print(f"{_MARK[c.status]}  {c.name:<{width}}  ", end="", markup=True, highlight=False)
            console.print(c.detail, markup=False, highlight=False, soft_wrap=True)
            if c.fix:
                console.print(
                    f"{'':6}  {'':<{width}}  fix: {c.fix}", markup=False, highlight=False, soft_wrap=True
                )
        warned = sum(c.status == "warn" for c in checks)
        if failed:
            console.print(f"{len(failed)} problem{'s' if len(failed) > 1 else ''} found", highlight=False)
        else:
            console.print(f"no problems found{f' ({warned} warnings)' if warned else ''}", highlight=False)
    if failed:
        raise typer.Exit(1)
