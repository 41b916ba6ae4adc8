#!/usr/bin/env python3
"""A fake ``llama-server`` for the gateway benchmark: ``fake_upstream.py`` under llama-server's argv.

Register it with ``blazar engine add --kind llama-cpp --path benches/baselines/fake_engine.py`` and Blazar
supervises it like the real engine: it passes ``--host`` (an address, or a unix socket path ending in
``.sock``), ``--port`` and ``--api-key-file`` (all honoured: requests without ``Authorization: Bearer <key>`` get
401, ``/health`` is open) and the rest of llama-server's flags (``--model``, ``--ctx-size``, ``--parallel``, ...), which are ignored; the model file is never opened.
Extra flags can come from the model's ``extra_args`` in Blazar's config: ``--chunks N``, ``--stream-mode``,
``--gap-ms``, ``--token-gap-ms``. ``--version`` answers as the llama-server build whose argv it takes (so Blazar
uses a unix socket for it, as for that build), unless ``FAKE_ENGINE_VERSION`` is set empty. Needs only the standard library (uses uvloop when it is
importable).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_upstream import main

VERSION = "version: 0.0.0 (build 11434, fake_engine.py: benches/baselines/fake_upstream.py as llama-server)"

if __name__ == "__main__":
    if sys.argv[1:] == ["--version"]:
        if os.environ.get("FAKE_ENGINE_VERSION", "1"):  # empty: an unknown build (bench_gateway --engine-tcp)
            print(VERSION)
    else:
        main()
