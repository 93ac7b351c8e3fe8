"""The server's Prometheus metrics, served as text at ``GET /metrics``."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mtkit.serving.batcher import Batcher

# the paths counted by name; any other is "other", so that a client cannot grow the label values
ROUTES = ("/v1/translate", "/translate", "/languages", "/health", "/metrics", "/openapi.json", "/docs")
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """Request, response, latency and batch metrics in a registry of their own (one per app)."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("mtkit_requests", "HTTP requests", ["path"], registry=self.registry)
        self.responses = Counter("mtkit_responses", "HTTP responses by status", ["status"], registry=self.registry)
        self.latency = Histogram("mtkit_request_seconds", "Request latency", ["path"], registry=self.registry)
        self.batch_sentences = Histogram(
            "mtkit_batch_sentences",
            "Sentences per batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=self.registry,
        )

    def watch(self, batcher: Batcher) -> None:
        """Gauges read from ``batcher`` at each scrape: its queue depth and the model's busy time."""
        queue = Gauge("mtkit_queue_sentences", "Sentences waiting to be translated", registry=self.registry)
        queue.set_function(lambda: batcher.depth)
        busy = Gauge("mtkit_model_busy_seconds", "Seconds the model has spent translating", registry=self.registry)
        busy.set_function(lambda: batcher.stats.busy)

    def request(self, path: str) -> None:
        """Count a request as it arrives."""
        self.requests.labels(route_label(path)).inc()

    def response(self, path: str, status: int, seconds: float) -> None:
        """Count a request's response: its status, and its latency by path."""
        self.latency.labels(route_label(path)).observe(seconds)
        self.responses.labels(str(status)).inc()

    def text(self) -> bytes:
        """Every metric in Prometheus' text format (``CONTENT_TYPE``)."""
        return generate_latest(self.registry)


def route_label(path: str) -> str:
    """``path`` if it is one of the server's routes, else "other"."""
    return path if path in ROUTES else "other"
