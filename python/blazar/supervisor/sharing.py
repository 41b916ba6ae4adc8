"""Catalog names that share one engine: models over the same weights file, as ``/api/create`` makes them (a
preset over another model's weights) or ``/api/copy`` does, run on one llama-server instead of one each, as
Ollama keeps one runner per weights file.

A name's engine is its *owner*'s: the oldest catalog model (then by name) whose file is the same file (one inode:
the catalog's copies are hard links) and whose ``[models."NAME"]`` settings in config.toml are equal, so the
engine is the one either name would start. A model that LoRA adapters are served on owns its engine (its
adapters are loaded on it), and directory models (safetensors, MLX) are never shared. Each name keeps its own
preset, scope and usage: only the engine is shared. The answer is memoised until this process changes a model
or adapter (``Catalog.generation``) or another process commits to the database (``PRAGMA data_version``).

It owns that mapping; ``gateway.core`` keys admission by it and ``Supervisor`` starts the owner's engine.
"""

from __future__ import annotations

import os
import stat
from collections import defaultdict

from blazar.catalog.models import Catalog, ModelRow
from blazar.config import Config


class Sharing:
    """``owner(name)``: the catalog name whose engine serves model ``name``."""

    def __init__(self, cfg: Config, catalog: Catalog) -> None:
        self._cfg = cfg
        self._catalog = catalog
        self._stamp: tuple[int, int] | None = None
        self._owners: dict[str, str] = {}

    def owner(self, name: str) -> str:
        """``name`` (normalised) or the model whose engine it shares."""
        stamp = (self._catalog.generation, self._data_version())
        if stamp != self._stamp:
            self._owners = self._compute()
            self._stamp = stamp
        return self._owners.get(name, name)

    def sharers(self, name: str) -> list[str]:
        """The other catalog names served by ``name``'s engine."""
        self.owner(name)  # brings the table up to date
        return [other for other, owner in self._owners.items() if owner == name]

    def _data_version(self) -> int:
        for (v,) in self._catalog.store.conn.execute("PRAGMA data_version"):
            return int(v)
        return 0

    def _compute(self) -> dict[str, str]:
        bases = {str(b) for (b,) in self._catalog.store.conn.execute("SELECT DISTINCT base FROM loras")}
        groups: dict[tuple[int, int], list[ModelRow]] = defaultdict(list)
        for row in self._catalog.list():
            if row.format != "gguf":
                continue
            try:
                st = os.stat(row.path)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode):  # directory models are never shared
                groups[(st.st_dev, st.st_ino)].append(row)
        owners: dict[str, str] = {}
        for rows in groups.values():
            if len(rows) < 2:
                continue
            rows.sort(key=lambda r: (r.created_at, r.name))
            for row in rows:
                if row.name in bases:
                    continue
                settings = self._cfg.model_override(row.name)
                first = next(r for r in rows if self._cfg.model_override(r.name) == settings)
                if first.name != row.name:
                    owners[row.name] = first.name
        return owners
