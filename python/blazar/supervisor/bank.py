"""The session bank: llama-server's slot KV checkpoints, kept across an engine's restarts.

When the supervisor stops a llama-cpp chat engine on purpose (idle, ``keep_alive``, ``blazar stop``, a restart
for another context, shutdown), each slot holding a prompt is saved to
``<data_dir>/sessions/<model>/_auto-<ctx per slot>-<shape>-<slot>.bin``, all within ``SAVE_BUDGET_SECS``. The
model's next engine of the same shape restores them before its first request, so a conversation that comes back
finds its prompt cached (``cached_tokens``) instead of processing it again. ``shape`` fingerprints the weights
file and the engine's whole command line (binary, context, slots, KV cache types, flags), so a bank is never
restored into another context shape, other weights under the same name, or another engine build. Banks beyond
``BANK_CAP_BYTES`` (all models together) are removed oldest first. A crash or a wedge saves nothing: a failing
engine's state is not trusted.

Owns the bank's file names and the engine's ``/slots`` calls; it never starts or stops a child, and a failure
here never fails a request or a stop (it is logged and the bank file dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from blazar.paths import EMBED_SUFFIXES
from blazar.supervisor import sleep

if TYPE_CHECKING:
    from blazar.supervisor.child import Child

log = logging.getLogger("blazar.supervisor")

SAVE_BUDGET_SECS = 2.0
"""How long an engine being stopped may spend saving its slots, all of them together (the seed's bound)."""
RESTORE_BUDGET_SECS = 2.0
"""How long a fresh engine may spend restoring its bank before its first request."""
BANK_CAP_BYTES = 512 * 2**20
"""The most bytes of banks kept on disk, all models together; the oldest go first."""

_BANK = re.compile(r"_auto-(\d+)-([0-9a-f]{12})-(\d+)\.bin")


def _banked(child: Child) -> Path | None:
    """Where ``child``'s banks live, or None when it keeps none: only llama-server chat engines without a
    projector (llama-server cannot save a multimodal slot) have them."""
    spec = child.spec
    if not spec.can.slot_pinning or child.key.endswith(EMBED_SUFFIXES) or spec.mmproj is not None:
        return None
    if spec.slot_save_dir is None or spec.ctx_per_slot <= 0 or not spec.slot_save_dir.is_dir():
        return None  # no folder: the engine was started without one (``profile.prepare``)
    return spec.slot_save_dir


def _shape(child: Child) -> str:
    """What a bank may be restored into: these weights (device, inode) under this exact command line."""
    seen = "\0".join([repr(child.weights), *child.spec.argv_template])
    return hashlib.sha256(seen.encode()).hexdigest()[:12]


def _name(child: Child, slot: int) -> str:
    return f"_auto-{child.spec.ctx_per_slot}-{_shape(child)}-{slot}.bin"


async def _slot_action(child: Child, slot: int, action: str, filename: str) -> dict[str, Any]:
    body = await child.ask(f"/slots/{slot}?action={action}", {"filename": filename})
    return body if isinstance(body, dict) else {}


async def _idle_slots(child: Child) -> list[int]:
    """The slots not generating now (llama-server would hold a save of a busy one until its answer ends, and a
    stop must not wait for that)."""
    slots = await child.ask("/slots")
    return [
        s["id"]
        for s in slots
        if isinstance(s, dict) and isinstance(s.get("id"), int) and not s.get("is_processing")
    ]


async def save(child: Child) -> int:
    """Save each of ``child``'s idle slots that holds a prompt (a running engine being stopped on purpose); slots
    holding nothing leave no file, and slots still answering are skipped. Returns how many were saved; never
    raises."""
    where = _banked(child)
    if where is None or not child.alive():
        return 0
    saved = 0
    name: str | None = None
    try:
        async with asyncio.timeout(SAVE_BUDGET_SECS):
            if await sleep.asleep(
                child
            ):  # its KV cache went when it fell asleep: nothing to save, no wake-up
                log.debug("session bank: %s is asleep; nothing to save", child.key)
                return 0
            for slot in await _idle_slots(child):
                name = _name(child, slot)
                reply = await _slot_action(child, slot, "save", name)
                if int(reply.get("n_saved") or 0) > 0:
                    saved += 1
                else:
                    (where / name).unlink(missing_ok=True)
                name = None
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
        why = f"it took over {SAVE_BUDGET_SECS:g}s" if isinstance(e, TimeoutError) else str(e)
        log.warning("session bank: saving %s failed (%s); what it did not save starts cold", child.key, why)
        if name is not None:
            with contextlib.suppress(OSError):  # a file the engine may have left half written
                (where / name).unlink(missing_ok=True)
    if saved:
        log.info("session bank: saved %d slot(s) of %s", saved, child.key)
        prune(where.parent)
    return saved


async def restore(child: Child) -> int:
    """Restore into a fresh ``child`` the banks saved for its model at its context per slot. Returns how many
    slots were restored; a bank the engine refuses is removed. Never raises."""
    where = _banked(child)
    if where is None:
        return 0
    restored = 0
    try:
        async with asyncio.timeout(RESTORE_BUDGET_SECS):
            for slot in range(child.spec.parallel):
                path = where / _name(child, slot)
                if not path.is_file():
                    continue
                try:
                    await _slot_action(child, slot, "restore", path.name)
                    restored += 1
                except (aiohttp.ClientError, OSError, ValueError) as e:
                    log.warning("session bank: %s refused %s (%s); removed", child.key, path.name, e)
                    path.unlink(missing_ok=True)
    except TimeoutError:
        log.warning(
            "session bank: restoring %s took over %gs; the rest start cold", child.key, RESTORE_BUDGET_SECS
        )
    if restored:
        log.info("session bank: restored %d slot(s) of %s", restored, child.key)
    return restored


def prune(sessions: Path, cap: int = BANK_CAP_BYTES) -> None:
    """Remove the oldest banks under ``sessions`` (every model's folder) until they hold at most ``cap`` bytes."""
    banks: list[tuple[float, int, Path]] = []
    for folder in sessions.iterdir() if sessions.is_dir() else ():
        with contextlib.suppress(OSError):
            for path in folder.iterdir():
                if _BANK.fullmatch(path.name):
                    st = path.stat()
                    banks.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in banks)
    for _, size, path in sorted(banks):
        if total <= cap:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            total -= size
            log.info(
                "session bank: removed %s/%s to stay under %d MiB", path.parent.name, path.name, cap >> 20
            )
