"""A local HTTP server on 127.0.0.1 for the fetch tests: serves bytes by name, answers ``Range: bytes=N-`` with 206,
and can cut a response midway, stall before or during one, or answer 404. Nothing leaves the machine."""

from __future__ import annotations

import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: a cut or a stall ends it

    def do_GET(self):  # noqa: N802 (http.server's name)
        state: Server = self.server.state
        name = self.path.lstrip("/")
        asked = self.headers.get("Range")
        state.requests.append((name, asked))
        if name in state.stall_before:
            state.released.wait(30)
            return
        blob = state.files.get(name)
        if blob is None:
            self.send_error(404, "Not Found")
            return
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", asked or "")
        if match and state.ranges:
            start = int(match[1])
            if start >= len(blob):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(blob)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(blob) - 1}/{len(blob)}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(blob) - start))
        self.end_headers()
        body = blob[start:]
        if name in state.cut_after:  # this response only: send that many bytes, then close the connection
            self.wfile.write(body[:state.cut_after.pop(name)])
            self.wfile.flush()
            return
        if name in state.stall_after:  # send that many bytes, then wait without closing
            self.wfile.write(body[:state.stall_after[name]])
            self.wfile.flush()
            state.released.wait(30)
            return
        self.wfile.write(body)
        state.sent += len(body)

    def log_message(self, *args):  # quiet
        pass


class Server:
    """``files`` by name; ``url`` is the base to give ``--mirror``. Use as a context manager."""

    def __init__(self, files: dict[str, bytes] | None = None):
        self.files = dict(files or {})
        self.cut_after: dict[str, int] = {}
        self.stall_before: set[str] = set()
        self.stall_after: dict[str, int] = {}
        self.ranges = True
        self.requests: list[tuple[str, str | None]] = []
        self.sent = 0
        self.released = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.state = self
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 whose port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
