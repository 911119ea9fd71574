"""Is beat's loop turning? ``/healthz`` on beat's metrics server (SPEC §17).

A Kubernetes ``httpGet`` liveness probe restarts a container whose probe fails; it must restart
a beat whose loop is stuck (a call that never returns, a store that stopped answering) and never
a healthy standby. So ``/healthz`` answers from the loop's *turns*, never from whether the
process or its server answers (``/metrics`` is served by a daemon thread whatever the loop does).

What counts as a turn is the loop's to say (``beat_loop.py``'s docstring): a round, or a
standby's lease attempt, that ended with its backends answering. With ``t`` the instant the last
turn ended, ``s`` the sleep the loop planned after it (at most the poll interval: an idle loop
asleep between rounds is healthy, whatever ``L``) and ``L`` = ``durable_beat_liveness_s``:

    200  while  now - t <= L + s
    503  once   now - t >  L + s      (the loop is stuck, or every round since fails)

both with the body ``{"role": "leader" | "standby", "last_turn_age_s": now - t}``, ``role`` this
beat's standing after its last round. Before the first turn ``t`` is the instant beat started,
so a first round that hangs is caught too. The answer is computed on the server's thread from two
values the loop replaces after each round, never by asking the loop or a backend: it comes while
the loop hangs. The first 503 of a stall and the first 200 after it are logged once each
(``loop_stalled``), so a restarted pod's previous log says why it was restarted.

Only the standard library: the metrics app the server serves beside ``/healthz`` is handed in
(``metrics.BeatMetrics`` gives prometheus-client's), so the rule is tested without a client.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from celery_durable_beat.logs import log_extra
from celery_durable_beat.model import Action

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger("celery_durable_beat.metrics")

HEALTH_PATH = "/healthz"
DEFAULT_LIVENESS_S = 30.0
"""The window when nothing else is said: SPEC §2's floor, ``settings.LIVENESS_FLOOR_S`` (not
imported: settings would bring ``redis_client`` into metrics; a unit test holds them equal)."""


@dataclass(frozen=True)
class Health:
    """One ``/healthz`` answer: ``live`` decides 200 or 503, the rest is the body."""

    live: bool
    role: str
    """``leader`` or ``standby``: this beat's standing after its last round."""
    last_turn_age_s: float

    @property
    def status(self) -> str:
        return "200 OK" if self.live else "503 Service Unavailable"

    def body(self) -> bytes:
        shown = {"role": self.role, "last_turn_age_s": round(self.last_turn_age_s, 3)}
        return json.dumps(shown).encode()


class Liveness:
    """The module docstring's rule on an injected clock, and the ``/healthz`` answer.

    ``restart``, ``turned`` and ``standing`` are called on the loop's thread, ``health`` on the
    server's at any time. Each writer replaces one attribute with a new value (a tuple, a bool)
    and the reader takes each once, so the loop never waits on a probe (the lock guards only the
    log line's once-per-stall flag, on the server's threads).
    """

    def __init__(self, liveness_s: float, monotonic: Callable[[], float]) -> None:
        self.liveness_s = liveness_s
        self.monotonic = monotonic
        self._last: tuple[float, float] = (monotonic(), 0.0)
        self._leader = False
        self._stalled = False  # the last answer was a 503 (its line is logged)
        self._lock = threading.Lock()

    def restart(self) -> None:
        """Beat starts: count from now, as though it had just turned with no sleep planned."""
        self._last = (self.monotonic(), 0.0)

    def turned(self, sleep: float) -> None:
        """A turn ended now; ``sleep``: how long the loop waits before its next round."""
        self._last = (self.monotonic(), max(0.0, sleep))

    def standing(self, leader: bool) -> None:
        """Who this beat is after a round, failed or not (the body's ``role``)."""
        self._leader = leader

    def health(self) -> Health:
        at, sleep = self._last
        age = max(0.0, self.monotonic() - at)
        role = "leader" if self._leader else "standby"
        return Health(age <= self.liveness_s + sleep, role, age)

    def answer(self, environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        """``GET`` / ``HEAD /healthz`` as a WSGI app: the health, in JSON, never cached."""
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        health = self.health()
        self._note(health)
        body = health.body()
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
        ]
        start_response(health.status, headers)
        return [b"" if method == "HEAD" else body]

    def _note(self, health: Health) -> None:
        """Log the first 503 of a stall and the first 200 after it, once each."""
        with self._lock:
            if health.live != self._stalled:
                return
            self._stalled = not health.live
        if health.live:
            log.info(
                "beat's loop turns again (last turn %.1fs ago): /healthz answers 200",
                health.last_turn_age_s,
                extra=log_extra(Action.LOOP_STALLED, stalled=False, role=health.role),
            )
            return
        log.warning(
            "beat's loop has not turned for %.1fs (durable_beat_liveness_s %g): /healthz "
            "answers 503 as %s, so a liveness probe restarts it",
            health.last_turn_age_s,
            self.liveness_s,
            health.role,
            extra=log_extra(Action.LOOP_STALLED, stalled=True, role=health.role),
        )


def beside(metrics: WSGIApplication, liveness: Liveness) -> WSGIApplication:
    """``/healthz`` from ``liveness``; every other path ``metrics``, as prometheus-client's own
    server answers any path with the metrics (so nothing scraped before changes)."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == HEALTH_PATH:
            return liveness.answer(environ, start_response)
        return metrics(environ, start_response)

    return app


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per request, none waited for at shutdown (as prometheus-client's server)."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No line per request on stderr: a probe every few seconds is not news."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def listen(addr: str, port: int, app: WSGIApplication) -> WSGIServer:
    """Serve ``app`` on ``addr:port`` (IPv6 too) from a daemon thread; ``OSError`` if the port
    cannot be bound. Why not prometheus-client's ``start_http_server``: it serves its own app
    only, and ``/healthz`` must be on the same port (SPEC §17)."""
    family, *_, sockaddr = socket.getaddrinfo(
        addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    server_class: type[_Server] = type("BeatServer", (_Server,), {"address_family": family})
    server = make_server(str(sockaddr[0]), port, app, server_class, _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="durable-beat-metrics")
    thread.daemon = True
    thread.start()
    return server
