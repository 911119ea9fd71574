"""Monitoring integrations in the test app's processes (``procapp``), each switched on by the
environment like the rest of the app, and each writing what it would send to a file a test reads:

- ``SENTRY_ENVELOPES``: the real sentry-sdk, ``sentry_sdk.init`` with
  ``CeleryIntegration(monitor_beat_tasks=True)`` (which wraps ``celery.beat.Scheduler.apply_entry``
  in beat and sends the worker's check-ins), on a transport that appends every envelope item it
  is given to that file, one JSON line each (``type``, ``payload``, ``pid``), instead of sending
  it: the DSN names a port nothing listens on;
- ``OTEL_SPANS``: OpenTelemetry's SDK with ``CeleryInstrumentor().instrument()``, every span
  appended to that file as it ends (``name``, ``kind``, ``trace_id``, ``span_id``, ``parent_id``,
  ``attributes``, ``pid``).

Imported by ``procapp`` only when one of them is set, so no other test process loads either SDK.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

SENTRY_DSN = "http://key@127.0.0.1:9/1"
"""A well-formed DSN whose port nothing listens on: the file transport below sends nothing."""


def _append(path: str, row: dict[str, Any]) -> None:
    line = (json.dumps(row, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one O_APPEND write per line: lines of two processes never mix
    finally:
        os.close(fd)


def install_from_env() -> None:
    if os.environ.get("SENTRY_ENVELOPES"):
        _sentry(os.environ["SENTRY_ENVELOPES"])
    if os.environ.get("OTEL_SPANS"):
        _opentelemetry(os.environ["OTEL_SPANS"])


def _sentry(path: str) -> None:
    import sentry_sdk
    from sentry_sdk.envelope import Envelope
    from sentry_sdk.integrations.celery import CeleryIntegration
    from sentry_sdk.transport import Transport

    class EnvelopeFile(Transport):
        """Each item of each envelope, as one JSON line of ``path``."""

        def capture_envelope(self, envelope: Envelope) -> None:
            for item in envelope.items:
                _append(
                    path,
                    {
                        "type": item.type,
                        "payload": json.loads(item.get_bytes() or b"null"),
                        "pid": os.getpid(),
                    },
                )

    sentry_sdk.init(
        dsn=SENTRY_DSN,
        transport=EnvelopeFile,
        integrations=[CeleryIntegration(monitor_beat_tasks=True)],
    )


def _opentelemetry(path: str) -> None:
    from opentelemetry import trace
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class SpanFile(SpanExporter):
        """Each span as one JSON line of ``path`` (SimpleSpanProcessor: when it ends)."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            for span in spans:
                context = span.get_span_context()
                assert context is not None
                _append(
                    path,
                    {
                        "name": span.name,
                        "kind": span.kind.name,
                        "trace_id": format(context.trace_id, "032x"),
                        "span_id": format(context.span_id, "016x"),
                        "parent_id": format(span.parent.span_id, "016x") if span.parent else None,
                        "attributes": dict(span.attributes or {}),
                        "pid": os.getpid(),
                    },
                )
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SpanFile()))
    trace.set_tracer_provider(provider)
    CeleryInstrumentor().instrument()
