"""Blazar: one local endpoint for every inference engine.

The package owns orchestration (config, catalog, engines, supervision, CLI) and the gateway; per-byte and
per-token work lives in the compiled ``blazar._native`` extension.
"""

from importlib.metadata import version as _version

__version__ = _version("blazar")  # set once, in pyproject.toml; the wheel's metadata carries it
