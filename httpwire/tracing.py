"""OpenTelemetry tracing of one process, off by default, and the W3C trace context it carries.

Each service builds one :class:`Tracing` at start from its own option (the gateway's
``opentelemetry.enabled``, the Status API's ``opentelemetry.enabled``, the relay's
``opentelemetry_enabled``) with :func:`setup`. Off, it is :data:`OFF`: ``enabled`` is False and
nothing of OpenTelemetry is imported, so a caller guards each tracing step with one attribute test
and its hot path pays nothing else. On, spans go through a batch span processor to an OTLP exporter
configured by the standard variables, as Centrifugo v6 sets it up: ``OTEL_EXPORTER_OTLP_PROTOCOL``
(``http/protobuf``, the default, or ``grpc``), ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``.

A trace crosses processes as a W3C ``traceparent`` string: an HTTP header, gRPC metadata, or the
outbox row's ``traceparent`` column between the Status API and the relay. :meth:`Tracing.correlate_logs`
makes every log line written inside a span end with ``trace_id=… span_id=…``.

A library of no service: imports nothing of ``gateway``, ``status_api`` or ``relay``. The
OpenTelemetry packages are an optional extra (``pip install 'taskcast[tracing]'``).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

TRACEPARENT = "traceparent"
#: Attribute names of the pipeline's ids on spans (the ``taskcast.`` namespace).
EVENT_ID = "taskcast.event_id"
TASK_ID = "taskcast.task_id"
VERSION = "taskcast.version"
OUTBOX_IDS = "taskcast.outbox.ids"
CHANNEL = "centrifugo.channel"  # Centrifugo's own attribute name on its server API spans

log = logging.getLogger("taskcast.tracing")


class TracingUnavailable(ValueError):
    """Tracing was asked for but the OpenTelemetry SDK or its OTLP exporter is not installed."""


class Tracing:
    """A process's tracer, or nothing (:data:`OFF`). Every method but :meth:`shutdown` and
    :meth:`correlate_logs` may be called only when :attr:`enabled` is True."""

    def __init__(self, tracer: Any = None, provider: Any = None) -> None:
        self.enabled = tracer is not None
        self._tracer = tracer
        self._provider = provider
        if tracer is not None:
            from opentelemetry import trace
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

            self._trace = trace
            self._propagator = TraceContextTextMapPropagator()
            self._kinds = {
                "server": trace.SpanKind.SERVER,
                "client": trace.SpanKind.CLIENT,
                "producer": trace.SpanKind.PRODUCER,
                "consumer": trace.SpanKind.CONSUMER,
                "internal": trace.SpanKind.INTERNAL,
            }

    def context_of(self, traceparent: str | None) -> Any:
        """The OpenTelemetry context a ``traceparent`` names (an empty context for None or junk:
        a span started under it is a root)."""
        if not traceparent:
            return self._trace.set_span_in_context(self._trace.INVALID_SPAN)
        return self._propagator.extract({TRACEPARENT: traceparent})

    @contextmanager
    def span(
        self,
        name: str,
        *,
        parent: str | Any | None = None,
        kind: str = "internal",
        attributes: Mapping[str, Any] | None = None,
        links: Iterable[str] = (),
    ) -> Iterator[Any]:
        """Start ``name`` as the current span until the block ends (an exception escaping the
        block is recorded and marks the span as an error). ``parent``: a ``traceparent`` string
        (the span joins that trace), an OpenTelemetry context, or None (the current span, if any).
        ``links``: ``traceparent`` strings of other traces this span serves (a batch)."""
        if isinstance(parent, str):
            parent = self.context_of(parent)
        span_links = []
        for tp in links:
            ctx = self._trace.get_current_span(self.context_of(tp)).get_span_context()
            if ctx.is_valid:
                span_links.append(self._trace.Link(ctx))
        with self._tracer.start_as_current_span(
            name, context=parent, kind=self._kinds[kind], attributes=attributes, links=span_links
        ) as span:
            yield span

    def traceparent(self, span: Any = None) -> str | None:
        """The ``traceparent`` of ``span`` (default: the current span); None without a valid one."""
        if span is None:
            span = self._trace.get_current_span()
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        return carrier.get(TRACEPARENT)

    def current_span(self) -> Any:
        return self._trace.get_current_span()

    def mark_error(self, span: Any, description: str) -> None:
        """Set ``span``'s status to error (Centrifugo marks an API reply carrying an error so)."""
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, description))

    def correlate_logs(self, handlers: Iterable[logging.Handler] | None = None) -> None:
        """Make the lines of ``handlers`` (default: the root logger's) end with the current span's
        ``trace_id=<32 hex> span_id=<16 hex>`` while a span is current (sampled or not). No-op
        when off."""
        if not self.enabled:
            return
        for handler in handlers if handlers is not None else logging.getLogger().handlers:
            if not isinstance(handler.formatter, _SpanFormatter):
                handler.setFormatter(_SpanFormatter(handler.formatter or logging.Formatter(), self._trace))

    def shutdown(self) -> None:
        """Export what is buffered and stop the exporter (at process exit). No-op when off."""
        if self._provider is not None:
            self._provider.shutdown()


class _SpanFormatter(logging.Formatter):
    def __init__(self, inner: logging.Formatter, trace: Any) -> None:
        super().__init__()
        self._inner = inner
        self._trace = trace

    def format(self, record: logging.LogRecord) -> str:
        line = self._inner.format(record)
        ctx = self._trace.get_current_span().get_span_context()
        if ctx.is_valid:
            return f"{line} trace_id={ctx.trace_id:032x} span_id={ctx.span_id:016x}"
        return line


OFF = Tracing()


def setup(enabled: bool, service_name: str, *, exporter: Any = None) -> Tracing:
    """The process's :class:`Tracing`: :data:`OFF` unless ``enabled``.

    Args:
        enabled: The service's option.
        service_name: ``service.name`` unless ``OTEL_SERVICE_NAME`` is set.
        exporter: A span exporter to use instead of OTLP (tests: the SDK's in-memory exporter).

    Raises:
        TracingUnavailable: ``enabled`` but the SDK (or the exporter the protocol needs) is missing,
            or ``OTEL_EXPORTER_OTLP_PROTOCOL`` names an unknown protocol.
    """
    if not enabled:
        return OFF
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(
            "tracing is enabled but opentelemetry-sdk is not installed (pip install 'taskcast[tracing]')"
        ) from exc
    if exporter is None:
        exporter = _otlp_exporter()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider.get_tracer("taskcast"), provider)


def _otlp_exporter() -> Any:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    modules = {
        "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    }
    if protocol not in modules:
        raise TracingUnavailable(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r}: use http/protobuf or grpc")
    try:
        module = importlib.import_module(modules[protocol])
    except ImportError as exc:
        extra = " opentelemetry-exporter-otlp-proto-grpc" if protocol == "grpc" else ""
        raise TracingUnavailable(
            f"the OTLP exporter for {protocol} is not installed (pip install 'taskcast[tracing]'{extra})"
        ) from exc
    return module.OTLPSpanExporter()
