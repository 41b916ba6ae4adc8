"""Quantizing a catalog model into a new one with llama.cpp's own ``llama-quantize`` (``blazar quantize``,
Ollama's ``POST /api/create`` with ``quantize``).

It owns which types may be asked for, the checks made before anything runs (a single-file GGUF, not quantized
already unless asked, a free name, a ``llama-quantize`` beside an installed llama-cpp engine), the tool's
command line and progress, and adding the result to the catalog. The file is written under
``models/.importing/`` and linked into place by ``Catalog.import_file``; a failed or cancelled run leaves
nothing. The engine binaries stay stock: the tool is the one the engine's build or release ships.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from blazar.catalog import names
from blazar.catalog.digests import sha256_file, split_set
from blazar.catalog.models import Catalog, ModelRow
from blazar.engines import registry
from blazar.engines.argv import engine_environment
from blazar.engines.build import QUANTIZER
from blazar.errors import BlazarError, CatalogError
from blazar.paths import safe_component
from blazar.store import Store

TYPES: tuple[str, ...] = (
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q8_0",
    "Q2_K",
    "Q3_K_S",
    "Q3_K_M",
    "Q3_K_L",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_K_S",
    "Q5_K_M",
    "Q6_K",
    "IQ4_NL",
    "IQ4_XS",
    "F16",
    "BF16",
)
"""The types ``llama-quantize`` makes without an importance matrix (Ollama's list and a few more)."""

FULL_PRECISION = ("F32", "F16", "BF16")
"""Sources that quantize cleanly; anything else is already quantized."""

_STEP = re.compile(rb"^\[\s*(\d+)/\s*(\d+)\]")

Progress = Callable[[int, int], None]
"""Called as (tensors_done, tensors_total) while the tool runs."""


class QuantizeError(BlazarError):
    """A quantization cannot start; the message says why and what to do."""

    status = 400


class QuantizeFailed(QuantizeError):
    """The tool ran and failed (or was stopped); the message quotes its log."""

    status = 500


MAKING: set[str] = set()
"""The names this process is making now: a second quantization to one of them is refused before it runs."""


@dataclass(frozen=True, slots=True)
class Job:
    """A checked quantization: its output becomes the catalog model ``name``."""

    source: ModelRow
    type: str
    name: str
    tool: Path
    log: Path
    replace: bool = False
    """A model of that name may exist, and is replaced by the result (Ollama's create)."""

    def argv(self, out: Path) -> list[str]:
        flags = [] if self.source.quantization in FULL_PRECISION else ["--allow-requantize"]
        return [str(self.tool), *flags, str(self.source.path), str(out), self.type]

    @property
    def status(self) -> str:
        """What Ollama's create stream says while it quantizes."""
        return f"quantizing {self.source.quantization or 'unknown'} model to {self.type}"


def parse_type(text: str) -> str:
    """'q4_k_m' -> 'Q4_K_M'; a type the tool cannot make without more input is a QuantizeError."""
    wanted = text.strip().upper()
    if wanted not in TYPES:
        raise QuantizeError(f"unknown quantization type '{text}': use one of {', '.join(TYPES)}")
    return wanted


def default_name(source: ModelRow, qtype: str) -> str:
    """``smollm2:q4_1`` -> ``smollm2:q8_0`` (a tag that named the old type names the new one); any other tag
    gets the type appended: ``smollm2:latest`` -> ``smollm2:latest-q8_0``."""
    base, _, tag = source.name.rpartition(":")
    old = (source.quantization or "").lower()
    new_tag = qtype.lower() if old and tag == old else f"{tag}-{qtype.lower()}"
    return names.normalize(f"{base}:{new_tag}")


def find_tool(store: Store) -> Path:
    """``llama-quantize`` beside an installed llama-cpp engine: the active one first, then the others."""
    tool, engines = registry.beside(store, "llama-cpp", QUANTIZER)
    if tool is not None:
        return tool
    if not engines:
        raise QuantizeError(
            "quantizing needs llama.cpp's llama-quantize, which comes with a llama-cpp engine: install one with"
            " `blazar engine install --kind llama-cpp` (or build it: `blazar engine build --kind llama-cpp"
            " --source DIR`)"
        )
    where = ", ".join(str(Path(r.path).parent) for r in engines)
    raise QuantizeError(
        f"no {QUANTIZER} beside the installed llama-cpp engines ({where}): install an official release"
        " (`blazar engine install --kind llama-cpp`) or rebuild (`blazar engine build --kind llama-cpp --source"
        " DIR`), both of which bring it"
    )


def plan(
    catalog: Catalog,
    store: Store,
    source_name: str,
    qtype: str,
    name: str | None = None,
    *,
    allow_requantize: bool = False,
    replace: bool = False,
) -> Job:
    """Check everything a quantization needs before it starts; raises a teaching error otherwise. With
    ``replace`` (Ollama's create) a catalog model of that name may exist: ``run_async``'s ``before_import``
    stops its engines once the new file is made, and the import replaces it."""
    qtype = parse_type(qtype)
    source = catalog.get(source_name)
    if name is not None:
        names.check(name)  # taken as given: a space in the new name is refused before the source's checks
    if source.format != "gguf" or source.path.is_dir():
        raise QuantizeError(
            f"'{source.name}' is a {source.format} model directory; quantize takes a GGUF file (convert the"
            " directory with llama.cpp's convert_hf_to_gguf.py, import the result, then quantize it)"
        )
    if split_set(source.path) is not None:
        raise QuantizeError(f"'{source.name}' is a split GGUF; quantize takes a single-file GGUF")
    have = source.quantization or "unknown"
    if have == qtype:
        raise QuantizeError(f"'{source.name}' is {qtype} already")
    if have not in FULL_PRECISION and not allow_requantize:
        raise QuantizeError(
            f"'{source.name}' is already quantized ({have}): quantizing it again loses more quality than"
            f" quantizing its F16/BF16/F32 original; import that instead, or pass --allow-requantize"
            ' (`"allow_requantize": true` over HTTP) to do it anyway'
        )
    full = catalog.check_new(name if name is not None else default_name(source, qtype), replace=replace)
    if full in MAKING:
        raise CatalogError(f"model '{full}' is being made by another quantization now; choose another name")
    tool = find_tool(store)
    log = catalog.data.logs / f"quantize-{safe_component(full)}.log"
    return Job(source=source, type=qtype, name=full, tool=tool, log=log, replace=replace)


def _step(line: bytes) -> tuple[int, int] | None:
    m = _STEP.match(line.lstrip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def _failed(job: Job, rc: int | None) -> QuantizeFailed:
    """The failure, quoting the log's tail: data-directory paths in it (the tool prints its files) and the log's
    own place are named relative to the data directory, as an HTTP error body must."""
    tail = job.log.read_bytes()[-1500:].decode(errors="replace").strip() if job.log.is_file() else ""
    tail = tail.replace(str(job.log.parent.parent) + os.sep, "")
    why = f"exit {rc}" if rc is not None else "it was stopped"
    return QuantizeFailed(
        f"{QUANTIZER} failed ({why}) quantizing '{job.source.name}' to {job.type}; full log:"
        f" logs/{job.log.name} in blazar's data directory\n{tail}"
    )


OUT = "quantized.gguf"
"""The tool's output file, in a fresh folder under ``models/.importing/``."""


def run(catalog: Catalog, job: Job, progress: Progress | None = None) -> ModelRow:
    """Quantize and add the result to the catalog, from synchronous code (the CLI): ``run_async`` on a loop of
    its own, each step handed to ``progress``. Ctrl-C cancels it, which kills the tool."""

    async def drive() -> None:
        async for done, total in run_async(catalog, job):
            if progress is not None:
                progress(done, total)

    asyncio.run(drive())
    return catalog.get(job.name)


async def run_async(
    catalog: Catalog, job: Job, before_import: Callable[[], Awaitable[None]] | None = None
) -> AsyncGenerator[tuple[int, int], None]:
    """Quantize on this loop's child watcher, yielding (tensors_done, tensors_total); the result is added to
    the catalog before the iterator ends (hashed in a thread). Closing the iterator early (a client that left)
    kills the tool and leaves nothing behind."""
    proc: asyncio.subprocess.Process | None = None
    out = catalog.files.staging() / OUT
    MAKING.add(job.name)
    try:
        job.log.parent.mkdir(parents=True, exist_ok=True)
        with job.log.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                *job.argv(out),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=engine_environment(()),  # not Blazar's own environment (its keys)
            )
            assert proc.stdout is not None
            async for line in proc.stdout:
                log.write(line)
                step = _step(line)
                if step is not None:
                    yield step
            rc = await proc.wait()
        if rc != 0 or not out.is_file():
            raise _failed(job, rc)
        digest = await asyncio.to_thread(sha256_file, out)
        if before_import is not None:  # the engines of the model it replaces stop once its successor is made
            await before_import()
        # a model of that name (``plan``'s ``replace``) is replaced in one step, so a failure here keeps it
        catalog.import_file(out, job.name, sha256=digest, replace=job.replace)
    finally:
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        MAKING.discard(job.name)
        shutil.rmtree(out.parent, ignore_errors=True)
