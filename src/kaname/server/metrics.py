"""Prometheus metrics of one server (own registry, so several apps can live in one process)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class Metrics:
    def __init__(self, cache_stats: Callable[[], tuple[int, int]],
                 cache_bytes: Callable[[], int] = lambda: 0):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("kaname_requests", "HTTP requests by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.tokens = Counter("kaname_tokens", "Tokens by kind (prompt, completion, forced, "
                              "draft, draft_accepted)",
                              ["kind"], registry=r)
        self.queue_depth = Gauge("kaname_queue_depth", "Requests waiting for a generation slot",
                                 registry=r)
        self.active = Gauge("kaname_active_generations", "Generations running", registry=r)
        self.mask_seconds = Histogram(
            "kaname_mask_seconds", "Constraint time per sampled token (mask, pick, commit)",
            buckets=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0),
            registry=r)
        self.batch_sequences = Histogram(
            "kaname_batch_sequences", "Sequences one model step of the local batch advances",
            buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64), registry=r)
        self.not_enforced = Counter("kaname_upstream_not_enforced",
                                    "Upstream completions the replay matcher rejected",
                                    registry=r)
        r.register(_CacheCollector(cache_stats, cache_bytes))

    def watch_batch(self, seconds: Callable[[], tuple[float, float]]) -> None:
        """`seconds()`: the local batch's (model, loops) seconds so far, read at scrape."""
        self.registry.register(_BatchCollector(seconds))

    def observe_constraint_ns(self, values: list[int]) -> None:
        for v in values:
            self.mask_seconds.observe(v / 1e9)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _CacheCollector:
    """Compile-cache hits and misses, and the bytes it holds (estimated, grammar/cache.py),
    read from the compiler at scrape time."""

    def __init__(self, stats: Callable[[], tuple[int, int]], size: Callable[[], int]):
        self._stats = stats
        self._size = size

    def collect(self):  # type: ignore[no-untyped-def]
        hits, misses = self._stats()
        c = CounterMetricFamily("kaname_compile_cache", "Grammar compile cache lookups",
                                labels=["result"])
        c.add_metric(["hit"], hits)
        c.add_metric(["miss"], misses)
        yield c
        yield GaugeMetricFamily("kaname_compile_cache_bytes",
                                "Compiled grammars kept, in estimated bytes (at most "
                                "--compile-cache-mb)", value=self._size())


class _BatchCollector:
    """Where the local batch's time goes: the model's steps, and the sequences' own loops
    between them (grammar, sampling, drafts, streaming), which hold every step up."""

    def __init__(self, seconds: Callable[[], tuple[float, float]]):
        self._seconds = seconds

    def collect(self):  # type: ignore[no-untyped-def]
        model, loops = self._seconds()
        c = CounterMetricFamily("kaname_batch_seconds", "Seconds of the local batch by part",
                                labels=["part"])
        c.add_metric(["model"], model)
        c.add_metric(["loops"], loops)
        yield c
