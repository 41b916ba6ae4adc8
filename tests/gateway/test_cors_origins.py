"""``cors_origins`` patterns: a ``*`` matches a run of characters other than ``/``, wherever it stands, and the
rest of the pattern must match too (a ``*`` in the middle once opened CORS to every origin with the prefix)."""

from __future__ import annotations

import pytest

from blazar.config.model import DEFAULT_CORS_ORIGINS
from blazar.gateway.app import Origins


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("https://a.example.com", True),
        ("https://a.b.example.com", True),
        ("https://evil.com", False),
        ("https://x.evil.com", False),
        ("https://example.com", False),
        ("http://a.example.com", False),
        ("http://localhost:3000", True),
        ("http://localhost:3000.evil.com/x", False),
        ("http://localhost", False),
    ],
)
def test_patterns(origin: str, allowed: bool) -> None:
    assert Origins(("https://*.example.com", "http://localhost:*")).allows(origin) is allowed


def test_the_default_is_this_machines_pages_and_star_alone_is_anyone() -> None:
    default = Origins(DEFAULT_CORS_ORIGINS)
    assert default.allows("http://localhost:8080") and default.allows("http://127.0.0.1")
    assert not default.allows("http://evil.com") and not default.allows("http://localhost.evil.com")
    assert Origins(("*",)).allows("https://anything.example") and not Origins(())
