"""A tiny webhook on 127.0.0.1 that records every POST it receives: the stand-in for Slack in
the tests of ``examples/monitoring/slack_on_skip.py`` (in this process and from a real beat)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """What the webhook was sent, oldest first; ``status`` is what it answers."""

    url: str
    posts: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def texts(self) -> list[str]:
        with self.lock:
            return [str(post["body"].get("text")) for post in self.posts]


@contextmanager
def recording_webhook() -> Iterator[Received]:
    """Serve until the block ends; yields what it received so far (and its URL)."""
    received: Received

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with received.lock:
                received.posts.append(
                    {
                        "path": self.path,
                        "content_type": self.headers.get("Content-Type"),
                        "body": body,
                    }
                )
            self.send_response(received.status)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads ``posts``, not stderr."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received = Received(f"http://127.0.0.1:{server.server_address[1]}/services/T000/B000/XXXX")
    thread = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
