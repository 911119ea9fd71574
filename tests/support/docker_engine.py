"""Whether a Docker engine answers, for tests/conftest.py's deselection of ``docker`` tests.

A plain ``GET /_ping`` on the engine's socket (``DOCKER_HOST``, default
``unix:///var/run/docker.sock``; ``tcp://host:port`` too): no docker SDK is imported and no
socket is left open in a run that has no engine.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


def engine_problem() -> str | None:
    """None when a Docker engine answers ``/_ping`` within 3 s, else why not, in a few words."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    url = urlparse(where)
    try:
        if url.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(3)
            address: str | tuple[str, int] = url.path
        elif url.scheme == "tcp" and url.hostname:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(3)
            address = (url.hostname, url.port or 2375)
        else:
            return None  # ssh:// or the like: let pytest-celery's own client try
        with sock:
            sock.connect(address)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            answer = sock.recv(64)
    except OSError as exc:
        return f"no Docker engine answers at {where} ({exc.strerror or exc})"
    if not answer.startswith(b"HTTP/1.") or b" 200 " not in answer.split(b"\r\n")[0]:
        return f"no Docker engine answers at {where} (it said {answer[:40]!r})"
    return None
