"""S3 requests, retries, throttles, failures and time per operation, from botocore's events."""

from __future__ import annotations

import time
from typing import Any

from rsm.metrics.registry import REGISTRY, MetricsRegistry

THROTTLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
        "TransactionInProgressException",
    }
)


class S3Hooks:
    """botocore event handlers counting S3 requests, retries, throttles, failures and time per operation.

    Registered on the session's event system (``before-call``, ``request-created``, ``needs-retry``,
    ``after-call``, ``after-call-error`` of service s3), so every request the store makes through s3fs's
    client is seen, attempts included, whoever issues it (copy, fetch, listings of the tools).
    """

    def __init__(self, registry: MetricsRegistry = REGISTRY) -> None:
        self.registry = registry

    def register(self, events: Any) -> None:
        events.register("before-call.s3", self.before_call, unique_id="rsm-metrics-before-call")
        events.register("request-created.s3", self.request_created, unique_id="rsm-metrics-request-created")
        events.register("needs-retry.s3", self.needs_retry, unique_id="rsm-metrics-needs-retry")
        events.register("after-call.s3", self.after_call, unique_id="rsm-metrics-after-call")
        events.register(
            "after-call-error.s3", self.after_call_error, unique_id="rsm-metrics-after-call-error"
        )

    @staticmethod
    def _operation(model: Any, event_name: str = "") -> str:
        name = getattr(model, "name", None)
        if name:
            return str(name)
        parts = event_name.split(".")
        return parts[2] if len(parts) > 2 else "unknown"

    def before_call(self, model: Any = None, context: Any = None, event_name: str = "", **_: Any) -> None:
        operation = self._operation(model, event_name)
        self.registry.record("s3-requests", (operation,))
        if isinstance(context, dict):
            context["rsm_metrics"] = {"operation": operation, "attempts": 0, "started": time.monotonic()}

    def request_created(self, request: Any = None, **_: Any) -> None:
        """One attempt (botocore makes and signs the request anew for each)."""
        context = getattr(request, "context", None)
        state = context.get("rsm_metrics") if isinstance(context, dict) else None
        if state is None:
            return
        state["attempts"] += 1
        if state["attempts"] > 1:
            self.registry.record("s3-retries", (state["operation"],))

    def needs_retry(
        self, response: Any = None, operation: Any = None, event_name: str = "", **_: Any
    ) -> None:
        """Counts an answer asking to slow down; returns None (the retry decision stays botocore's)."""
        if not response:
            return None
        http, parsed = response
        code = (parsed or {}).get("Error", {}).get("Code") if isinstance(parsed, dict) else None
        status = getattr(http, "status_code", None)
        # S3 answers "slow down" with 503 (its code only in a body: a HEAD has none) or 429
        if code in THROTTLE_CODES or status in (429, 503):
            self.registry.record("s3-throttles", (self._operation(operation, event_name),))
        return None

    def _finish(self, context: Any, failed: bool) -> None:
        state = context.get("rsm_metrics") if isinstance(context, dict) else None
        if state is None:
            return
        key = (state["operation"],)
        self.registry.record("s3-request-time", key, (time.monotonic() - state["started"]) * 1000)
        if failed:
            self.registry.record("s3-errors", key)

    def after_call(
        self, context: Any = None, parsed: Any = None, http_response: Any = None, **_: Any
    ) -> None:
        status = getattr(http_response, "status_code", 200) or 200
        # a 404 is the store's "missing" (an overlay never set, a probe), which it answers; not a failure
        self._finish(context, status >= 300 and status != 404)

    def after_call_error(self, context: Any = None, **_: Any) -> None:
        self._finish(context, True)
