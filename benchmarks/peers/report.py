"""The side-by-side table, the machine it ran on, and the section of benchmarks/RESULTS.md it goes in."""

from __future__ import annotations

import os
import platform
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

SECTION = "## Peers, side by side"  # measured on PostgreSQL's durable defaults
SECTION_FSYNC_OFF = "## Peers, side by side, fsync off (an extra)"  # run.py --fsync-off


@dataclass
class Row:
    """One line of the table: a system's figures over the rounds."""

    key: str
    label: str
    steps_per_s: list[float] = field(default_factory=list)
    latency_median_ms: list[float] = field(default_factory=list)
    latency_p99_ms: list[float] = field(default_factory=list)
    peak_rss_mb: list[float] = field(default_factory=list)
    peak_pss_mb: list[float] = field(default_factory=list)
    partial: bool = False
    failed: str | None = None
    errors: list[str] = field(default_factory=list)
    config: str = ""

    def add(self, result: dict[str, object]) -> None:
        for name in ("steps_per_s", "latency_median_ms", "latency_p99_ms", "peak_rss_mb", "peak_pss_mb"):
            value = result.get(name)
            if isinstance(value, (int, float)):
                getattr(self, name).append(float(value))
        self.partial = self.partial or bool(result.get("partial"))
        self.config = str(result.get("config") or self.config)

    def median(self, name: str) -> float | None:
        values: list[float] = getattr(self, name)
        return statistics.median(values) if values else None


def _number(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _ratio(value: float | None, base: float | None) -> str:
    return "—" if value is None or not base else f"{value / base:.2f}×"


def table(rows: list[Row], pgflow_key: str = "pgflow") -> str:
    """The markdown table: medians over the rounds (steps/s also shows min–max)."""
    base = next((row.median("steps_per_s") for row in rows if row.key == pgflow_key), None)
    ceilings = [(row.median("steps_per_s") or 0.0, row.label) for row in rows if row.key.startswith("ceiling")]
    ceiling = max(ceilings)[0] if ceilings else None
    lines = [
        "| system | steps/s (min–max) | ÷ pgflow 1 worker | ÷ best ceiling | latency median | latency p99 "
        "| worker peak RSS (PSS) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        if row.failed:
            lines.append(f"| {row.label} | failed: {row.failed.replace('|', '/')} | | | | | |")
            continue
        steps = row.median("steps_per_s")
        values = row.steps_per_s
        spread = f" ({_number(min(values))}–{_number(max(values))})" if len(values) > 1 else ""
        mark = " (partial†)" if row.partial else ""
        rss, pss = row.median("peak_rss_mb"), row.median("peak_pss_mb")
        memory = "—" if rss is None else f"{rss:.0f} MB ({pss:.0f} MB)" if pss is not None else f"{rss:.0f} MB"
        latency = row.median("latency_median_ms")
        p99 = row.median("latency_p99_ms")
        lines.append(
            f"| {row.label} | {_number(steps)}{spread}{mark} | {_ratio(steps, base)} | "
            f"{_ratio(steps, ceiling)} | {_latency(latency)} | {_latency(p99)} | {memory} |"
        )
    return "\n".join(lines)


def same_round_ratios(raw: list[dict[str, object]], ratios: list[tuple[str, str, str, str]]) -> str:
    """Each ratio divided within each round (the machine drifts between rounds), and the
    median over the rounds. A denominator of ``"ceiling"`` is the round's best ceiling row;
    the figure ``"p99_over_median"`` is a row's latency p99 over its own median."""
    by_round: dict[object, dict[str, dict[str, object]]] = {}
    for item in raw:
        by_round.setdefault(item["round"], {})[str(item["system"])] = item

    def figure(item: dict[str, object] | None, name: str) -> float | None:
        if item is None:
            return None
        if name == "p99_over_median":
            p99, median = item.get("latency_p99_ms"), item.get("latency_median_ms")
            return float(p99) / float(median) if isinstance(p99, float) and isinstance(median, float) else None
        value = item.get(name)
        return float(value) if isinstance(value, (int, float)) else None

    lines = ["| ratio, within each round | per round | median |", "| --- | --- | ---: |"]
    for title, top, bottom, name in ratios:
        values = []
        for items in by_round.values():
            numerator = figure(items.get(top), name)
            if name == "p99_over_median":
                value = numerator
            elif bottom == "ceiling":
                best = max((figure(v, name) or 0.0 for k, v in items.items() if k.startswith("ceiling")), default=0.0)
                value = numerator / best if numerator is not None and best else None
            else:
                denominator = figure(items.get(bottom), name)
                value = numerator / denominator if numerator is not None and denominator else None
            if value is not None:
                values.append(value)
        if values:
            per_round = ", ".join(f"{v:.2f}" for v in values)
            lines.append(f"| {title} | {per_round} | **{statistics.median(values):.2f}×** |")
    return "\n".join(lines)


def _latency(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} ms" if value < 100 else f"{value:,.0f} ms"


def machine() -> dict[str, str]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "?"
    try:
        found = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
        if found:
            memory = f"{int(found.group(1)) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return {
        "nproc": str(os.cpu_count()),
        "memory": memory,
        "cpu": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def replace_section(path: Path, body: str) -> None:
    """Put ``body`` (which starts with a section's heading) in place of that section, keeping
    every other one.

    The file is read right before it is written, so a section another engineer added while
    the benchmark ran is kept.
    """
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    lines = text.splitlines(keepends=True)
    heading = body.splitlines()[0].rstrip()
    start = next((index for index, line in enumerate(lines) if line.rstrip() == heading), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n"
    else:
        end = next((index for index in range(start + 1, len(lines)) if lines[index].startswith("## ")), len(lines))
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + body.rstrip("\n") + "\n" + ("\n" + tail if tail else "")
    path.write_text(new)


class OthersCpu:
    """How much of the machine processes other than this benchmark's used over an interval.

    The machine's busy time (/proc/stat) minus the CPU time of the benchmark's own trees (this
    process, its PostgreSQL and its Redis, each with the children they have reaped and the
    ones still running), as a share of all cores. Noise from elsewhere shows up here.
    """

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.tick = os.sysconf("SC_CLK_TCK")
        self.start_busy = self.start_mine = 0
        self.start_time = 0.0

    def begin(self) -> None:
        import time

        self.start_busy, self.start_mine, self.start_time = _busy(), self._mine(), time.monotonic()

    def share(self) -> float:
        """The others' share of all cores since begin(), from 0 to 1."""
        import time

        elapsed = time.monotonic() - self.start_time
        others = (_busy() - self.start_busy) - (self._mine() - self.start_mine)
        return max(0.0, others / (elapsed * self.tick * (os.cpu_count() or 1))) if elapsed > 0 else 0.0

    def _mine(self) -> int:
        from benchmarks.peers.common import tree

        total = 0
        for pid in tree([pid for pid in self.roots if pid]):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
        return total


def _busy() -> int:
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq + steal
