"""Prometheus metrics in the text exposition format (version 0.0.4), for the daemon and the fleet page.

Why not `prometheus_client`: importing it costs ~60 ms and ~5 MiB of resident memory, an eighth of the
daemon's, for a handful of families that are read at most every few seconds. What is here is what the
format needs: `# HELP` / `# TYPE` lines, label values escaped, counters, gauges and histograms with
cumulative `le` buckets, `_sum` and `_count`. Real Prometheus and `promtool check metrics` read it in
the tests.

Families are built at scrape time from the state their owner already keeps (`Family.sample`), except
histograms and counters that only the scrape would otherwise lose (`Histogram`, kept per label set).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field

from edgeclaw.records import dataclass

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds, from a sub-millisecond register read to a minute-long command.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0)

Labels = Mapping[str, str]


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _labels_text(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(str(v))}"' for k, v in labels.items()) + "}"


@dataclass
class Family:
    """One metric family: its samples, each (name suffix, labels, value)."""

    name: str
    kind: str  # "counter", "gauge", "histogram"
    help: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def sample(self, value: float, suffix: str = "", **labels: str) -> Family:
        self.samples.append((suffix, labels, value))
        return self

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.help.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}"]
        lines.append(f"# TYPE {self.name} {self.kind}")
        for suffix, labels, value in self.samples:
            lines.append(f"{self.name}{suffix}{_labels_text(labels)} {format_value(value)}")
        return "\n".join(lines) + "\n"


@dataclass
class _Series:
    buckets: list[int]
    total: float = 0.0
    count: int = 0


class Histogram:
    """Observations per label set, bounded in how many label sets it keeps (`max_series`): beyond it,
    new ones count under the `overflow` labels, so an unbounded label source cannot grow it."""

    def __init__(
        self,
        name: str,
        help: str,
        label_names: Sequence[str],
        buckets: Sequence[float] = DURATION_BUCKETS,
        *,
        max_series: int = 256,
    ) -> None:
        self.name, self.help = name, help
        self.label_names = tuple(label_names)
        self.bounds = tuple(sorted(buckets))
        self.max_series = max_series
        self._series: dict[tuple[str, ...], _Series] = {}

    def observe(self, value: float, *labels: str) -> None:
        key = tuple(labels)
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= self.max_series - 1:  # the last one is kept for the overflow
                key = tuple("overflow" for _ in self.label_names)
                series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series([0] * len(self.bounds))
        index = bisect_left(self.bounds, value)
        if index < len(self.bounds):
            series.buckets[index] += 1
        series.total += value
        series.count += 1

    def family(self) -> Family:
        out = Family(self.name, "histogram", self.help)
        for key, series in sorted(self._series.items()):
            labels = dict(zip(self.label_names, key, strict=True))
            cumulative = 0
            for bound, in_bucket in zip(self.bounds, series.buckets, strict=True):
                cumulative += in_bucket
                out.sample(cumulative, "_bucket", **labels, le=format_value(bound))
            out.sample(series.count, "_bucket", **labels, le="+Inf")
            out.sample(series.total, "_sum", **labels)
            out.sample(series.count, "_count", **labels)
        return out


def render(families: Iterable[Family]) -> bytes:
    """The exposition of these families (a family with no samples is left out)."""
    return "".join(f.render() for f in families if f.samples).encode("utf-8")
