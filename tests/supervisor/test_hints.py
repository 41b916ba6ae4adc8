"""Cache hints from llama-server's Prometheus counters (``supervisor/hints.py``): parsing and the weighted
average. The scrape of a real engine is in tests/e2e/test_cache_hints.py."""

from __future__ import annotations

import pytest

from blazar.supervisor import hints

# As llama-server b11434 writes /metrics (abridged: the counters around the ones read are kept)
METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 31
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 93
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 40
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 10
llamacpp:requests_processing{slot="0"} 1
llamacpp:prompt_tokens_total{slot="0"} 999
garbage line
llamacpp:n_busy_slots_per_decode nan
"""


def test_parse_reads_the_four_counters_and_nothing_else() -> None:
    assert hints.parse(METRICS) == {
        hints.PROMPT: 31.0,
        hints.CACHED: 93.0,
        hints.DRAFTED: 40.0,
        hints.ACCEPTED: 10.0,
    }
    assert hints.parse("llamacpp:prompt_tokens_total x\nllamacpp:prompt_tokens_cached_total\n") == {}


def test_hints_are_a_weighted_average_of_each_periods_share() -> None:
    h = hints.CacheHints()
    h.update(
        hints.parse(METRICS)
    )  # since the engine started: 93 of 124 prompt tokens cached, 10 of 40 drafts
    assert h.cache_hint == pytest.approx(0.75) and h.spec_accept == pytest.approx(0.25)
    h.update({hints.PROMPT: 31, hints.CACHED: 93, hints.DRAFTED: 40, hints.ACCEPTED: 10})
    assert h.cache_hint == pytest.approx(0.75) and h.spec_accept == pytest.approx(
        0.25
    )  # no traffic: unchanged
    h.update({hints.PROMPT: 131, hints.CACHED: 93, hints.DRAFTED: 40, hints.ACCEPTED: 10})  # 100 uncached
    assert h.cache_hint == pytest.approx(0.7 * 0.75 + 0.3 * 0.0)
    h.update({hints.PROMPT: 5, hints.CACHED: 15})  # counters went down: the engine restarted them
    assert h.cache_hint == pytest.approx(0.7 * 0.525 + 0.3 * 0.75)
    assert h.spec_accept == pytest.approx(0.25)
    assert hints.CacheHints().cache_hint is None  # nothing served yet: no hint
