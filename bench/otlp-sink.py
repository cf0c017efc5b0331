#!/usr/bin/env python3
"""An OTLP/HTTP receiver that accepts every export and keeps nothing, for
measuring a node that exports traces (docs/performance.md, "Tracing"):

    python3 bench/otlp-sink.py 4318 &
    WEIR_OTLP_ENDPOINT=http://127.0.0.1:4318 ONLY='RLS' bench/server-count.sh
"""
import http.server
import sys


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        # An empty ExportTraceServiceResponse.
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
