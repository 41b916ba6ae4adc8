"""Blazar: one local endpoint for every inference engine.

The package owns orchestration (config, catalog, engines, supervision, CLI) and the gateway; per-byte and
per-token work lives in the compiled ``blazar._native`` extension.
"""

__version__ = "0.1.0"
