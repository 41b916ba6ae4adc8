#!/usr/bin/env python3
"""Write docs/config.md, the configuration reference, from the built-in defaults (``config.default_doc``).

Usage: config_reference.py [--check]   (--check: exit 1, saying so, when docs/config.md is not what it writes)
"""

from __future__ import annotations

import sys
from pathlib import Path

from blazar.config.default_doc import render_reference

PAGE = Path(__file__).resolve().parent.parent / "docs" / "config.md"


def main(argv: list[str]) -> int:
    text = render_reference()
    if "--check" in argv:
        if PAGE.is_file() and PAGE.read_text() == text:
            return 0
        print(f"{PAGE.name} is stale: run python scripts/config_reference.py", file=sys.stderr)
        return 1
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
