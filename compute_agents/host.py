"""What an executor reads of its host (Linux)."""

from __future__ import annotations

from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def memory_in_use(meminfo: Path = MEMINFO) -> float:
    """The share of the host's memory in use, 1 − MemAvailable ÷ MemTotal; 0.0 where the kernel does not
    say (no /proc/meminfo, or neither line), so that nothing is evicted on a guess."""
    try:
        lines = meminfo.read_text().splitlines()
    except OSError:
        return 0.0
    fields = {name: value.split()[0] for name, _, value in (line.partition(":") for line in lines) if value}
    try:
        total, available = int(fields["MemTotal"]), int(fields["MemAvailable"])
    except (KeyError, ValueError):
        return 0.0
    return 1 - available / total if total > 0 else 0.0
