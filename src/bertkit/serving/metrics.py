"""The server's Prometheus metrics, kept in process and rendered as Prometheus' text format at ``/metrics``.

Label values are escaped as the text format says (backslash, double quote, newline), and the routes come from
the routing table (:class:`bertkit.serving.gate.Gate` labels any other path ``other``), so the label set is
bounded and nothing a client sends becomes a line of its own.
"""

from __future__ import annotations

import threading
from collections import Counter

#: latency histogram buckets, seconds
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: batch size histogram buckets, inputs
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def label(value: object) -> str:
    """``value`` as a label value of Prometheus' text format (quotes added)."""
    text = str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")
    return f'"{text}"'


class Histogram:
    def __init__(self, buckets: tuple[float, ...]):
        self.buckets, self.counts, self.total, self.count = buckets, [0] * len(buckets), 0.0, 0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1

    def lines(self, name: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        out = [f'{name}_bucket{{{labels}{sep}le="{b}"}} {c}' for b, c in zip(self.buckets, self.counts)]
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}')
        braces = f"{{{labels}}}" if labels else ""
        return [*out, f"{name}_sum{braces} {self.total}", f"{name}_count{braces} {self.count}"]


class Metrics:
    """Requests by route and status and in progress, batch sizes, queue depth, request latency; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()
        self.latency: dict[str, Histogram] = {}
        self.batch_sizes = Histogram(SIZE_BUCKETS)
        self.batch_tokens = Histogram(tuple(2 ** i for i in range(6, 16)))
        self.queue_depth = 0
        self.inputs = 0
        self.in_progress = 0  # requests being answered (the Gate counts them), /metrics scrapes aside

    def request(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(route, status)] += 1
            self.latency.setdefault(route, Histogram(BUCKETS)).observe(seconds)

    def batch(self, size: int, tokens: int) -> None:
        with self._lock:
            self.batch_sizes.observe(size)
            self.batch_tokens.observe(tokens)
            self.inputs += size

    def render(self) -> str:
        with self._lock:
            lines = ["# HELP bertkit_requests_total HTTP requests by route and status code.",
                     "# TYPE bertkit_requests_total counter"]
            lines += [f"bertkit_requests_total{{route={label(r)},status={label(s)}}} {n}"
                      for (r, s), n in sorted(self.requests.items())]
            lines += ["# HELP bertkit_request_duration_seconds Time from request to response.",
                      "# TYPE bertkit_request_duration_seconds histogram"]
            for route, histogram in sorted(self.latency.items()):
                lines += histogram.lines("bertkit_request_duration_seconds", f"route={label(route)}")
            lines += ["# HELP bertkit_batch_size Inputs per model batch.", "# TYPE bertkit_batch_size histogram"]
            lines += self.batch_sizes.lines("bertkit_batch_size")
            lines += ["# HELP bertkit_batch_tokens Tokens per model batch.", "# TYPE bertkit_batch_tokens histogram"]
            lines += self.batch_tokens.lines("bertkit_batch_tokens")
            lines += ["# HELP bertkit_queue_depth Inputs waiting for the model.", "# TYPE bertkit_queue_depth gauge",
                      f"bertkit_queue_depth {self.queue_depth}",
                      "# HELP bertkit_inputs_total Inputs the model has run.", "# TYPE bertkit_inputs_total counter",
                      f"bertkit_inputs_total {self.inputs}",
                      "# HELP bertkit_requests_in_progress Requests being answered (scrapes of /metrics aside).",
                      "# TYPE bertkit_requests_in_progress gauge", f"bertkit_requests_in_progress {self.in_progress}"]
        return "\n".join(lines) + "\n"
