"""Plain-text tables for the CLI (`gslice status`, `top`, `group ls`)."""
from __future__ import annotations

import time
import unicodedata

from .client import Group, Status
# Labels the Kubernetes driver puts on the groups it creates.
from .kubernetes.claim_plan import LABEL_CLAIM as CLAIM_LABEL, LABEL_PODS as PODS_LABEL
from .units import format_bytes, format_share


def terminal_safe(text: str) -> str:
    """`text` with every control or format character (ESC and other terminal
    escapes, CR, BS, bidi overrides) shown as \\xNN / \\uNNNN: values that
    came from tenants (process names) cannot drive the operator's terminal."""
    return "".join(ch if ch.isprintable() and unicodedata.category(ch) != "Cf" else
                   (f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}") for ch in text)


def table(header: list[str], rows: list[list[str]]) -> str:
    rows = [[terminal_safe(str(cell)) for cell in row] for row in rows]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in [header, *rows]]
    return "\n".join(lines)




def owner_text(labels: dict[str, str]) -> str:
    """Who a group is for, from its labels: 'claim NS/NAME, pod NS/POD' for a
    Kubernetes claim's group, else the labels as k=v."""
    if CLAIM_LABEL in labels:
        text = f"claim {labels[CLAIM_LABEL]}"
        pods = labels.get(PODS_LABEL, "")
        return f"{text}, pod {pods}" if pods else text
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def groups_table(groups: list[Group]) -> str:
    if not groups:
        return "no groups (create one with: gslice group create NAME --request 30% --memory 4GiB)"
    return table(["GROUP", "REQUEST", "LIMIT", "MEMORY", "PRIORITY", "ON DAEMON LOSS", "FOR"],
                 [[g.name, format_share(g.request), format_share(g.limit), format_bytes(g.memory_quota),
                   g.priority.name.lower(), g.on_daemon_loss, owner_text(g.labels)] for g in groups])


def status_text(status: Status) -> str:
    lines = [
        f"GPU {status.gpu_uuid} ({status.gpu_name}), {format_bytes(status.physical_memory)}, "
        f"window {status.window_seconds:g} s, busy {format_share(status.busy_fraction)}, "
        f"{status.decisions} decisions",
    ]
    if status.holder_client_id:
        lines.append(f"token {status.token_id} held by {status.holder_client_id} (group {status.holder_group}); "
                     f"{len(status.waiting_client_ids)} waiting")
    else:
        lines.append(f"token free; {len(status.waiting_client_ids)} waiting")
    if status.state_note:
        lines.append(f"state: {status.state_note}")
    lines.append("")
    if status.groups:
        lines.append(table(
            ["GROUP", "SHARE", "REQUEST", "LIMIT", "PRIORITY", "MEMORY USED/QUOTA", "CLIENTS", "WAITING", "TOKENS",
             "PREEMPTED"],
            [[g.group.name, format_share(g.share), format_share(g.group.request), format_share(g.group.limit),
              g.group.priority.name.lower(),
              f"{format_bytes(g.memory_used)}/{format_bytes(g.group.memory_quota)}" + (" OVER" if g.over_quota else "")
              + (f" ({format_bytes(g.memory_awaiting_driver)} awaiting driver)" if g.memory_awaiting_driver else ""),
              str(g.clients), str(g.waiting), str(g.tokens_granted), str(g.preemptions)] for g in status.groups]))
        for g in status.groups:
            if g.group.labels:
                lines.append(f"for: {g.group.name}: {owner_text(g.group.labels)}")
        for g in status.groups:
            # Only the exception: "wait" is every group's default.
            if g.group.on_daemon_loss == "open":
                lines.append(f"on daemon loss: {g.group.name}: open (runs unmetered while tokend is unreachable)")
        for g in status.groups:
            if g.note:
                lines.append(f"note: {g.group.name}: {g.note}")
    else:
        lines.append("no groups")
    if status.clients:
        lines.append("")
        lines.append(table(
            ["CLIENT", "GROUP", "PID", "PROCESS", "STATE", "MEMORY", "ATTACHED"],
            [[c.client_id[:12], c.group, str(c.pid), c.process_name or "?",
              "holding" if c.holding else "waiting" if c.waiting else "idle", format_bytes(c.memory_used),
              time.strftime("%H:%M:%S", time.localtime(c.attached_at))] for c in status.clients]))
    # Tables are safe cell by cell; the free-text lines (notes, names) here.
    if status.unmanaged_processes:
        lines.append("")
        lines.append("processes escaping gslice (from NVML):")
        lines.append(table(["PID", "GROUP", "MEMORY", "PROBLEM", "ACTION"],
                           [[str(p.pid), p.group or "-", format_bytes(p.used_memory), p.problem, p.action]
                            for p in status.unmanaged_processes]))
    return "\n".join(terminal_safe(part) for line in lines for part in line.split("\n"))
