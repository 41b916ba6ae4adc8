#!/usr/bin/env python3
"""A fake ``llama-server`` for the gateway benchmark: ``fake_upstream.py`` under llama-server's argv.

Register it with ``blazar engine add --kind llama-cpp --path benches/baselines/fake_engine.py`` and Blazar
supervises it like the real engine: it passes ``--host``, ``--port`` and ``--api-key-file`` (all honoured:
requests without ``Authorization: Bearer <key>`` get 401, ``/health`` is open) and the rest of llama-server's
flags (``--model``, ``--ctx-size``, ``--parallel``, ...), which are ignored; the model file is never opened.
Extra flags can come from the model's ``extra_args`` in Blazar's config: ``--chunks N``, ``--stream-mode``,
``--gap-ms``, ``--token-gap-ms``. Needs only the standard library (uses uvloop when it is importable).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_upstream import main

if __name__ == "__main__":
    main()
