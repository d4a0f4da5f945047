"""TokendMetrics.labelled keeps each labelled series it made; a deleted
group's are dropped with the group, so a group made again under the same
name counts from zero, in series /metrics shows."""
from __future__ import annotations

from tokend.metrics import TokendMetrics


def test_a_group_made_again_after_its_deletion_counts_in_a_fresh_series():
    metrics = TokendMetrics("GPU-test")
    granted = metrics.labelled(metrics.tokens_granted, "g")
    granted.inc(3)
    assert metrics.labelled(metrics.tokens_granted, "g") is granted, "the series is made once"
    metrics.forget_group("g")
    assert metrics.registry.get_sample_value("gslice_tokens_granted_total", {"group": "g"}) is None
    metrics.labelled(metrics.tokens_granted, "g").inc()
    assert metrics.registry.get_sample_value("gslice_tokens_granted_total", {"group": "g"}) == 1


def test_forgetting_a_group_keeps_the_other_groups_series():
    metrics = TokendMetrics("GPU-test")
    kept = metrics.labelled(metrics.memory_used, "other")
    kept.set(4096)
    metrics.labelled(metrics.memory_used, "g").set(1)
    metrics.forget_group("g")
    assert metrics.labelled(metrics.memory_used, "other") is kept
    assert metrics.registry.get_sample_value("gslice_group_memory_used_bytes", {"group": "other"}) == 4096
