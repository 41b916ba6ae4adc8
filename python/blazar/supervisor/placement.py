"""Where a model name is served, worked out once: the catalog model asked for, the model whose engine serves it
(itself, the model whose weights it shares, or a LoRA adapter's base), that engine's child key, its slots and
context per slot and the model's preset (its keep-alive default is ``keepalive.KeepAlive.default_for``).

``Placements.place`` is the one memo of it, per (client name, embedding, late chunking): kept while this process
has not changed a model row (``Catalog.generation``) and for at most ``PLACE_MEMO_SECS``, so a change another
process made (``blazar rm`` and an import of that name) is seen within that. Adapters, whisper models and unknown
names are looked up each time, as they may change at run time. Routing (the admission key and slots), the
supervisor (which engine to start) and tenancy (a request's context for its quota estimate) read it. No I/O beyond the catalog's SQLite reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from blazar.catalog import names, presets
from blazar.catalog.loras import LoraRow, Loras
from blazar.catalog.models import Catalog, ModelRow
from blazar.catalog.presets import Preset
from blazar.config import Config
from blazar.launch.settings import model_settings
from blazar.paths import child_key
from blazar.supervisor.sharing import Sharing

PLACE_MEMO_SECS = 1.0
"""How long a memoised placement is trusted before the catalog is read again."""
_MEMO_MAX = 1024
"""Distinct (client name, use) pairs remembered; the table is cleared past this."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one client-given model name is served (see the module docstring)."""

    name: str
    """The name asked for, normalised (``name:tag``)."""
    row: ModelRow | None
    """The catalog model of that name; None for a LoRA adapter or a name the catalog lacks."""
    adapter: LoraRow | None
    engine_row: ModelRow | None
    """The catalog model whose engine serves it (None for an adapter whose base left the catalog, or an unknown
    name)."""
    key: str
    """The child key of that engine (``paths.child_key``: its embedding engines have keys of their own)."""
    slots: int
    """Admission's slot count: the model's ``parallel`` (its embedding engines': a power of two); 1 for whisper."""
    ctx_per_slot: int
    """The context one request may use, as configured (``ctx_size = 0``: the model's trained context) over its
    KV streams; the engine's may be smaller once fitted, never larger. 0: not known (an unknown name)."""
    preset: Preset | None
    replicas: int = 1
    """Engine instances of it this host may run (``replicas``; 1 for embedding and whisper engines): admission
    shares out ``slots`` times this, and ``Supervisor.instance_for`` picks the instance."""

    @property
    def whisper(self) -> bool:
        return self.row is not None and self.row.format == "whisper"


def _trained_per_slot(row: ModelRow | None, streams: int) -> int:
    trained = row.context_length if row is not None else None
    return max(trained // streams, 1) if trained else 0


class Placements:
    """``place``: the memoised placement of a client-given name."""

    def __init__(self, cfg: Config, catalog: Catalog, loras: Loras, sharing: Sharing) -> None:
        self._cfg = cfg
        self._catalog = catalog
        self._loras = loras
        self._sharing = sharing
        self._memo: dict[tuple[str, bool, bool], tuple[Placement, float, int]] = {}

    def place(
        self, model: str, *, embedding: bool = False, tokens: bool = False, fresh: bool = False
    ) -> Placement:
        """Where ``model`` is served for a chat (or, with ``embedding``, its pooled embeddings; with ``tokens``,
        its per-token ones); ``fresh`` reads the catalog whatever the memo holds. ``model`` must be a well-formed
        name (``names.check``)."""
        use = (model, embedding, tokens)
        now = time.monotonic()
        if not fresh:
            hit = self._memo.get(use)
            if hit is not None and now < hit[1] and hit[2] == self._catalog.generation:
                return hit[0]
        generation = self._catalog.generation
        name = names.normalize(model)
        adapter = self._loras.find(name)
        base = adapter.base if adapter is not None else name  # an adapter runs on its base model's engine
        row = self._catalog.find(name) if adapter is None else None
        whisper = row is not None and row.format == "whisper"
        owner = self._sharing.owner(base)  # a model over another's weights file shares its engine
        engine_row = row if row is not None and owner == row.name else self._catalog.find(owner) or row
        st = model_settings(self._cfg, base)
        placed = Placement(
            name=name,
            row=row,
            adapter=adapter,
            engine_row=engine_row,
            key=child_key(owner, embedding, tokens),
            slots=1 if whisper else st.slots(embeddings=embedding or tokens),
            ctx_per_slot=st.ctx_per_slot or _trained_per_slot(engine_row, st.streams),
            preset=presets.compile(row.preset) if row is not None else None,
            replicas=1 if whisper or embedding or tokens else st.replicas,
        )
        if row is not None and not whisper:
            if len(self._memo) >= _MEMO_MAX:
                self._memo.clear()
            self._memo[use] = (placed, now + PLACE_MEMO_SECS, generation)
        return placed

    def forget(self, name: str) -> None:
        """Drop what the memo holds of ``name`` (normalised): an adapter removed or replaced."""
        self._memo = {k: v for k, v in self._memo.items() if v[0].name != name}
