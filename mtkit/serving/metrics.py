"""The server's Prometheus metrics, served as text at ``GET /metrics``."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from mtkit.serving.batcher import Batcher
from mtkit.serving.pool import ModelPool

# the paths counted by name; any other is "other", so that a client cannot grow the label values
ROUTES = (
    "/v1/translate", "/v1/models", "/translate", "/detect", "/languages", "/health", "/metrics", "/openapi.json", "/docs"
)  # fmt: skip
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """Request, response, latency and batch metrics, the models' (labelled by model name) and the process's (its
    resident memory, CPU time) in a registry of their own (one per app)."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("mtkit_requests", "HTTP requests", ["path"], registry=self.registry)
        self.responses = Counter("mtkit_responses", "HTTP responses by status", ["status"], registry=self.registry)
        self.latency = Histogram("mtkit_request_seconds", "Request latency", ["path"], registry=self.registry)
        self.batch_sentences = Histogram(
            "mtkit_batch_sentences",
            "Sentences per batch, by model",
            ["model"],
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=self.registry,
        )
        calls = "Translate calls by model (a pivot's legs count one each)"
        self.model_requests = Counter("mtkit_model_requests", calls, ["model"], registry=self.registry)
        sentences = "Sentences translated by model"
        self.model_sentences = Counter("mtkit_model_sentences", sentences, ["model"], registry=self.registry)
        self.model_events = {
            event: Counter(f"mtkit_model_{event}s", help, ["model"], registry=self.registry)
            for event, help in (
                ("load", "Models loaded"),
                ("unload", "Models unloaded to make room"),
                ("failure", "Model loads that failed"),
            )
        }
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes and the like

    def batch(self, model: str, sentences: int) -> None:
        """Count one batch of ``model`` (called on the model thread)."""
        self.batch_sentences.labels(model).observe(sentences)
        self.model_sentences.labels(model).inc(sentences)

    def watch(self, batcher: Batcher, pool: ModelPool) -> None:
        """Gauges read from ``batcher`` and ``pool`` at each scrape (its queue depth, the models' busy time, the
        models in memory), and the pool's loads, unloads and failures counted as they happen."""
        queue = Gauge("mtkit_queue_sentences", "Sentences waiting to be translated", registry=self.registry)
        queue.set_function(lambda: batcher.depth)
        busy = Gauge("mtkit_model_busy_seconds", "Seconds the models have spent translating", registry=self.registry)
        busy.set_function(lambda: batcher.stats.busy)
        resident = Gauge("mtkit_models_resident", "Models in memory", registry=self.registry)
        resident.set_function(pool.resident_count)
        for name in pool.specs:  # every model's series from the start, at 0
            self.model_requests.labels(name)
            self.model_sentences.labels(name)
            for counter in self.model_events.values():
                counter.labels(name)
        pool.listeners.append(lambda event, name: self.model_events[event].labels(name).inc())

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
