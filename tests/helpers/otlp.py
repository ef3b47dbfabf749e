"""An OTLP/HTTP traces receiver for tests: what a collector does with the services' exports
(``POST /v1/traces``, protobuf ``ExportTraceServiceRequest``, optionally gzipped), decoded into
:class:`Span` values. Needs the ``opentelemetry-proto`` package (the dev extra installs it)."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: SpanKind numbers of the OTLP protocol (opentelemetry/proto/trace/v1/trace.proto).
KIND_SERVER, KIND_CLIENT, KIND_PRODUCER, KIND_CONSUMER = 2, 3, 4, 5
STATUS_ERROR = 2


@dataclass(frozen=True)
class Span:
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    attributes: dict[str, Any]
    kind: int = 0
    status: int = 0


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class Receiver:
    """An OTLP/HTTP traces endpoint (``POST /v1/traces``, protobuf, optionally gzipped)."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_pb

        self.spans: list[Span] = []
        lock = threading.Lock()
        spans = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    raw = gzip.decompress(raw)
                request = trace_pb.ExportTraceServiceRequest.FromString(raw)
                with lock:
                    for rs in request.resource_spans:
                        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                        for ss in rs.scope_spans:
                            for s in ss.spans:
                                spans.append(
                                    Span(
                                        str(resource.get("service.name")),
                                        s.trace_id.hex(),
                                        s.span_id.hex(),
                                        s.parent_span_id.hex(),
                                        s.name,
                                        {a.key: _value(a.value) for a in s.attributes},
                                        s.kind,
                                        s.status.code,
                                    )
                                )
                body = trace_pb.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
