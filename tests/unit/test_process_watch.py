"""The bypass rule of tokend's NVML process watch (tokend/process_watch.py)."""
from __future__ import annotations

from gslice.tokend.process_watch import Bypass, GpuProcessUse, find_bypass

MiB = 1 << 20


def test_unattached_process_is_reported_and_exempt_ones_are_not():
    found = find_bypass([GpuProcessUse(10, 5 * MiB), GpuProcessUse(11, MiB), GpuProcessUse(1, MiB)],
                        attached={11: "g"}, quotas={"g": 8 * MiB}, exempt=frozenset({1}))
    assert found == [Bypass(10, 5 * MiB, "", "not attached")]


def test_group_over_quota_by_what_nvml_measures_not_what_was_declared():
    """Two processes of a group under the quota each, over it together (one
    re-attached declaring 0 after a daemon restart): both reported."""
    processes = [GpuProcessUse(20, 6 * MiB), GpuProcessUse(21, 5 * MiB), GpuProcessUse(30, 9 * MiB)]
    found = find_bypass(processes, attached={20: "g", 21: "g", 30: "h"}, quotas={"g": 8 * MiB, "h": 10 * MiB})
    assert found == [Bypass(20, 6 * MiB, "g", "over quota"), Bypass(21, 5 * MiB, "g", "over quota")]


def test_nothing_reported_when_everyone_is_attached_and_within_quota():
    assert find_bypass([GpuProcessUse(20, MiB)], attached={20: "g"}, quotas={"g": MiB}) == []
