"""The server's Prometheus metrics, in one place (requests, versions, the registry follower)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("mavias_serve_requests_total", "inference requests by outcome (ok, invalid, unauthorized, "
                   "not_ready, error)", ["model", "version", "outcome"])
LATENCY = Histogram("mavias_serve_request_seconds", "inference requests answered, from the handler's entry to the "
                    "response built (admission, parsing, preprocessing, ONNX Runtime, the answer)",
                    ["model", "version"],
                    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
LOADS = Counter("mavias_serve_model_loads_total", "versions loaded and verified", ["model"])
LOAD_FAILURES = Counter("mavias_serve_model_load_failures_total", "versions refused (load or verification)", ["model"])
SERVING = Gauge("mavias_serve_version_info", "1 for the version being served", ["model", "version"])
POLL_ERRORS = Counter("mavias_registry_poll_errors_total", "registry polls that failed, by exception type",
                      ["model", "error"])
LAST_POLL = Gauge("mavias_registry_last_success_timestamp_seconds", "Unix time of the last successful registry poll",
                  ["model"])
POLL_AGE = Gauge("mavias_registry_poll_age_seconds", "seconds since the last successful registry poll (or since the "
                 "start, before the first)", ["model"])
