"""Claims taken ahead: a prefork worker's main process claims the ticks it receives, in batches,
before it hands them to the pool, when the claims are the store's rows (SPEC §6: the guard's cost
per tick is small).

Why: with the claims in the store a claim is one statement and one commit that waits for
PostgreSQL's disk. Taken by each pool process before each run, it adds that wait (and a second
one for an ``acks_late`` run's end) to every run: a prefork process is handed its next job only
when it is idle, so the waits add up, tick after tick, and a guarded prefork worker ran at about
0.3x a plain one. Taken here, ahead, the waits overlap: a thread of the main process claims
whatever has arrived since its last call in one statement (one commit for all: a group commit),
while the event loop goes on receiving and the pool goes on running what was claimed before.

Where it is not used, and why: the thread shares the main process's GIL with Celery's event
loop, which is busy under load, and each hand-over of the GIL costs both (measured: a claim call
that takes 0.22 ms of CPU next to an idle thread takes 1.0 ms next to a busy one). With the
claims in Redis a claim in the pool process is one Lua call that waits for no disk, and with the
``threads`` and ``solo`` pools the tasks themselves run in the main process: there, claims taken
ahead measured slower than claims taken by the run (docs/benchmarks.md), so those workers claim
as before (``guard.GuardRuntime.enter`` in the run). Gevent and eventlet workers (no event loop
of Kombu's) do too.

The flow, for a tick whose task carries the guard (``hooks.guard_first``), that no broker gave
back (``redelivered``: those keep the wait of ``GuardRuntime.enter``), and whose delivery is a
first attempt or a retry:

1. Celery's strategy hands the request to ``consumer.on_task_request``, which
   ``ClaimAheadStep`` wraps: the request waits here instead, and the claims thread is woken.
2. The thread lets deliveries gather ``GATHER_S``, claims every waiting one in one
   ``GuardRuntime.claim_ahead`` call (``Claims.claim_many``), each with an owner of its own,
   then makes a socket the event loop watches readable.
3. On the loop's thread, each request goes on to Celery's own ``on_task_request``, in the order
   received. A claimed one carries its claim in its request (``AHEAD_KEY``: the owner, when, and
   whether the main process writes its end), which the pool process takes out before Celery
   traces the task (``hooks.claim_request``) and holds as its own (``GuardRuntime.adopt``): no
   round trip there. Until a pool process accepts it, the main process's heartbeat pushes the
   claim on (``hold_ahead``), so a tick waiting behind long runs stays ``started``. A refused
   one, or every one when the store does not answer, goes on without: the pool process claims
   as it would without this module, so a duplicate is refused there, leaving no trace, and an
   outage fails open.
4. An ``acks_late`` run's end is written by the main process too (``EndHere``): from what
   Celery's tracer returned, in the claims thread's next call, before the message is
   acknowledged, so many runs' ends share a commit where each pool process would wait for one.

Ordinary tasks, and ticks that go on as they came, are not held: only ticks wait for their
claim, and they go on in the order received.

A claim taken ahead may wait long before its run starts: the run then claims again as the same
owner (rule 1 of ``runs/base.py``), which holds while the claim has not expired and is refused
if a duplicate delivery took it since. When the consumer stops (a shutdown, a lost connection),
the requests still waiting here are dropped, as Celery drops its reserved requests: their
messages go back to the queue, and the claims taken for them are given back
(``release_ahead``), so the next delivery claims at once. A request already handed on keeps its
claim: the pool may still run it. Ends still waiting are written, and their messages
acknowledged, as the consumer stops; an end that comes later (a warm shutdown lets the pool
finish) is written and acknowledged at once. A worker killed outright leaves its claims
``started`` until ``run_ttl``: the broker gives their messages back marked redelivered, and
those deliveries wait for the claim to expire, then run (``guard.py``).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from billiard.einfo import ExceptionWithTraceback  # type: ignore[import-untyped]
from celery import bootsteps
from celery.exceptions import Ignore, Reject, Retry, Terminated, TimeLimitExceeded, WorkerLostError

from celery_durable_beat.logs import log_extra
from celery_durable_beat.model import Action
from celery_durable_beat.runs.base import RunKey, RunState, RunWrite, Wanted, WriteIf
from celery_durable_beat.worker.guard import Ahead, GuardRuntime
from celery_durable_beat.worker.origin import periodic_origin

log = logging.getLogger("celery_durable_beat.worker")

AHEAD_KEY = "durable_beat_ahead"
"""The request field that carries a claim taken ahead to the pool process, which removes it
before the task sees its request (a field left there would travel on as a header of retries)."""
BATCH_MAX = 500
"""Most deliveries one call claims."""
GATHER_S = 0.002
"""How long the claims thread lets deliveries (and ends) gather once woken: each call, and each
wake of the event loop that answers it, then serves several ticks under load, for 2 ms more
of latency per tick."""
STOP_WAIT_S = 5.0
"""How long stopping waits for a claim call in flight."""

_NOT_HERE = (Retry, Terminated, TimeLimitExceeded, WorkerLostError)
"""Ends the main process's other hooks record (``EndHere``)."""

Runtime = Callable[[], GuardRuntime]
Guarded = Callable[[Any], bool]
Waiting = tuple[Any, Wanted]
"""A request and the claim it waits for."""


class ClaimAhead:
    """The main process's claims (module docstring), for one event loop (``hub``)."""

    def __init__(
        self,
        hub: Any,
        forward: Callable[[Any], Any],
        runtime: Runtime,
        gather_s: float = GATHER_S,
    ) -> None:
        self.hub = hub
        self.gather_s = gather_s
        self.forward = forward
        self.runtime = runtime
        self._unclaimed: deque[Waiting] = deque()
        self._claimed: deque[tuple[Any, Wanted, Ahead | None]] = deque()
        self._ends: deque[tuple[RunWrite, Callable[[], Any] | None]] = deque()
        """Ends to write, each with what to do once written (acknowledge the message)."""
        self._written: deque[Callable[[], Any]] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        self._thread = threading.Thread(
            target=self._claim_loop, name="durable-beat-claims", daemon=True
        )
        self._proc: Any = None
        self._conn: Any = None

    def start(self) -> None:
        import multiprocessing
        import os as _os

        mode = _os.environ.get("AHEAD_PROC")
        if mode in ("1", "2"):
            ctx = multiprocessing.get_context("fork")
            here, there = ctx.Pipe()
            self._proc = ctx.Process(target=_serve, args=(there, self.runtime), daemon=True)
            self._proc.start()
            self._conn = here
        self._hubmode = mode == "2"
        self._inflights: deque[Any] = deque()
        self._flush_scheduled = False
        self.batches: list[int] = []
        if self._hubmode:
            self.hub.add_reader(self._conn.fileno(), self._on_answer)
            return
        self.hub.add_reader(self._reader, self._on_claimed)
        self._thread.start()

    def _send_next(self) -> None:
        if self._flush_scheduled or not (self._unclaimed or self._ends):
            return
        self._flush_scheduled = True
        self.hub.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not (self._unclaimed or self._ends):
            return
        batch = list(self._unclaimed)
        self._unclaimed.clear()
        ends = list(self._ends)
        self._ends.clear()
        self._inflights.append((batch, ends))
        self._conn.send(([w for _r, w in batch], [w for w, _t in ends]))

    def _on_answer(self) -> None:
        while self._conn.poll():
            answers_list = self._conn.recv()
            for found in answers_list:
                batch, ends = self._inflights.popleft()
                now_ms = self.runtime().clock.now_ms()
                answers = found if found is not None else [RunState.UNKNOWN] * len(batch)
                for (request, wanted), state in zip(batch, answers, strict=True):
                    ahead = Ahead(wanted[1], now_ms) if state is None else None
                    self._go_on(request, wanted, ahead)
                for _w, then in ends:
                    if then is not None:
                        then()

    def _call(self, what: str, items: Any) -> Any:
        self._conn.send((what, items))
        return self._conn.recv()

    def submit(self, request: Any, wanted: Wanted) -> None:
        """``request`` goes on once its claim is answered."""
        self._unclaimed.append((request, wanted))
        if self._hubmode:
            self._send_next()
            return
        self._wake.set()

    # -- the claims thread ------------------------------------------------------------------------
    def _claim_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._stop.wait(self.gather_s)  # what arrives meanwhile joins this call
            self._wake.clear()
            while (self._unclaimed or self._ends) and not self._stop.is_set():
                if self._unclaimed:
                    self._claim_batch()
                if self._ends:
                    self._end_batch()

    def _claim_batch(self) -> None:
        batch: list[Waiting] = []
        with suppress(IndexError):  # deque pops are atomic: the loop's thread only appends
            while len(batch) < BATCH_MAX:
                batch.append(self._unclaimed.popleft())
        runtime = self.runtime()
        try:
            wanteds = [wanted for _request, wanted in batch]
            if self._conn is not None:
                found = self._call("claim", wanteds)
            else:
                found = runtime.claim_ahead(wanteds)
        except Exception:  # never strand a tick here: each goes on and claims in its run
            _failed("claims taken ahead failed; %d tick(s) claim in their runs", len(batch))
            found = None
        now_ms = runtime.clock.now_ms()
        answers = found if found is not None else [RunState.UNKNOWN] * len(batch)
        for (request, wanted), state in zip(batch, answers, strict=True):
            ahead = Ahead(wanted[1], now_ms) if state is None else None
            self._claimed.append((request, wanted, ahead))
        with suppress(OSError):  # a full buffer: the loop is woken already
            self._writer.send(b"\0")

    def _end_batch(self) -> None:
        batch: list[tuple[RunWrite, Callable[[], Any] | None]] = []
        with suppress(IndexError):
            while len(batch) < BATCH_MAX:
                batch.append(self._ends.popleft())
        try:
            writes = [write for write, _then in batch]
            if self._conn is not None:
                self._call("end", writes)
            else:
                self.runtime().end_ahead(writes)
        except Exception:  # acknowledged all the same: a claim left started only expires
            _failed("%d run end(s) not written; their messages are acknowledged", len(batch))
        self._written.extend(then for _write, then in batch if then is not None)
        with suppress(OSError):
            self._writer.send(b"\0")

    def end(self, write: RunWrite, then: Callable[[], Any] | None) -> None:
        """Write a run's end, then (on the loop's thread) call ``then``; once stopped, both at
        once, here (a warm shutdown: the pool's last results come after the consumer stops)."""
        if self._stop.is_set():
            self.runtime().end_ahead([write])
            if then is not None:
                then()
            return
        self._ends.append((write, then))
        if self._hubmode:
            self._send_next()
            return
        self._wake.set()

    # -- the event loop's thread ------------------------------------------------------------------
    def _on_claimed(self) -> None:
        with suppress(OSError):
            self._reader.recv(4096)
        while not self._stop.is_set():
            try:
                self._written.popleft()()
            except IndexError:
                break
        while not self._stop.is_set():
            try:
                request, wanted, ahead = self._claimed.popleft()
            except IndexError:
                return
            self._go_on(request, wanted, ahead)

    def _go_on(self, request: Any, wanted: Wanted | None, ahead: Ahead | None) -> None:
        if ahead is not None and wanted is not None:
            ends_here = _ENDS_ALL or bool(getattr(request.task, "acks_late", False))
            request._request_dict[AHEAD_KEY] = (ahead.owner, ahead.claimed_at_ms, ends_here)
            if ends_here:
                request.on_success = EndHere(self, request, wanted[0], ahead.owner)
            if not _LEAN:
                runtime = self.runtime()
                runtime.hold_ahead(wanted[0], ahead.owner)
                request.on_accepted = _Accepted(request, runtime, ahead.owner)
        try:
            self.forward(request)
        except Exception:  # Celery's own flow failed: logged as Celery logs an internal error
            _failed("tick %s could not be handed to the pool", str(request.id))
            if ahead is not None and wanted is not None:  # its claim is not held forever
                self.runtime().drop_ahead(ahead.owner)
                self.runtime().release_ahead([wanted])

    def stop(self) -> None:
        """Drop what waits and give back its claims (module docstring)."""
        self._stop.set()
        self._wake.set()
        with suppress(OSError, KeyError, ValueError):
            self.hub.remove_reader(self._reader)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT_S)
        given_back: list[Wanted] = []
        while self._claimed:
            _request, wanted, ahead = self._claimed.popleft()
            if ahead is not None:
                given_back.append(wanted)
        self._unclaimed.clear()
        if given_back:
            self.runtime().release_ahead(given_back)
        ends, self._ends = list(self._ends), deque()
        if ends:
            self.runtime().end_ahead([write for write, _then in ends])
        for then in [*self._written, *(then for _write, then in ends if then is not None)]:
            then()
        self._written.clear()
        self._reader.close()
        self._writer.close()


_BATCH: list[int] = []
_ENDS_ALL = __import__("os").environ.get("AHEAD_ENDS_ALL") == "1"
_LEAN = __import__("os").environ.get("AHEAD_LEAN") == "1"
import os as _os0
_GATHER = float(_os0.environ.get("AHEAD_GATHER_MS", "0")) / 1000


def _serve(conn: Any, runtime: Runtime) -> None:
    """PROTOTYPE: the claims process's loop."""
    rt = runtime()
    while True:
        try:
            what, items = conn.recv()
        except EOFError:
            return
        if isinstance(what, list):
            msgs = [(what, items)]
            if _GATHER:
                import time as _t
                _t.sleep(_GATHER)
            while conn.poll():
                msgs.append(conn.recv())
            wanted = [w for ws, _e in msgs for w in ws]
            ends = [e for _w, es in msgs for e in es]
            found = rt.claim_ahead(wanted) if wanted else []
            if ends:
                rt.end_ahead(ends)
                rt.tracker.flush()
            out, i = [], 0
            for ws, _e in msgs:
                out.append(None if found is None else found[i:i + len(ws)])
                i += len(ws)
            conn.send(out)
            _BATCH.append(len(wanted))
            if len(_BATCH) % 100 == 0:
                import os as _o
                with open(f"/tmp/batches.serve.{_o.getpid()}", "w") as f:
                    f.write(f"{len(_BATCH)} statements, mean {sum(_BATCH)/len(_BATCH):.2f}, max {max(_BATCH)}\n")
            continue
        if what == "claim":
            conn.send(rt.claim_ahead(items))
        else:
            rt.end_ahead(items)
            rt.tracker.flush()
            conn.send(None)


def _failed(text: str, *args: object) -> None:
    log.exception(text, *args, extra=log_extra(Action.CLAIM_AHEAD_FAILED))


class _Accepted:
    """A claimed request's accept callback: Celery's own, then the pool process's heartbeat
    takes over from the main process's (``GuardRuntime.hold_ahead``)."""

    def __init__(self, request: Any, runtime: GuardRuntime, owner: str) -> None:
        self.own = request.on_accepted
        self.runtime = runtime
        self.owner = owner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.runtime.drop_ahead(self.owner)
        return self.own(*args, **kwargs)


class EndHere:
    """The success callback of an ``acks_late`` tick claimed ahead: the main process writes
    the run's end (the pool process does not), and acknowledges or rejects its message only
    once that is written, so a worker killed in between leaves a finished claim, which refuses
    the broker's redelivery. Writing it here lets one call carry the ends of many runs, where
    each pool process would wait for a commit of its own, run after run.

    What the end is, from what Celery's tracer returned: a success, or a task that raised
    ``Ignore``, ``succeeded``; ``Reject`` with ``requeue`` gives the tick back; ``Reject``
    without, or any other exception, ``failed``. Nothing is written for ``Retry`` (the pool
    process wrote ``retried`` before publishing the retry), nor for a run terminated, lost or
    timed out, which the main process's other hooks record as they always did."""

    def __init__(self, ahead: ClaimAhead, request: Any, key: RunKey, owner: str) -> None:
        self.ahead = ahead
        self.request = request
        self.key = key
        self.owner = owner
        self.own = type(request).on_success.__get__(request)
        self.keep_ms = ahead.runtime().dedup_ttl_ms
        self._pending: RunWrite | None = None

    def __call__(self, failed__retval__runtime: Any, **kwargs: Any) -> Any:
        self._pending = self._end(failed__retval__runtime)
        if self._pending is None:
            return self.own(failed__retval__runtime, **kwargs)
        request = self.request
        request.acknowledge = self._then(type(request).acknowledge.__get__(request))
        request.reject = self._then_reject(type(request).reject.__get__(request))
        try:
            return self.own(failed__retval__runtime, **kwargs)
        finally:
            if self._pending is not None:  # Celery neither acknowledged nor rejected it
                self.ahead.end(self._pending, None)
                self._pending = None

    def _end(self, failed__retval__runtime: Any) -> RunWrite | None:
        failed, retval, _runtime = failed__retval__runtime
        if not failed:
            return self._write(RunState.SUCCEEDED)
        exc = getattr(retval, "exception", None)
        if isinstance(exc, ExceptionWithTraceback):  # as Celery unwraps it
            exc = exc.exc
        if isinstance(exc, Ignore):
            return self._write(RunState.SUCCEEDED)
        if isinstance(exc, Reject):
            return self._write(None) if exc.requeue else self._write(RunState.FAILED)
        if isinstance(exc, Exception) and not isinstance(exc, _NOT_HERE):
            return self._write(RunState.FAILED)
        return None

    def _write(self, state: RunState | None) -> RunWrite:
        if state is None:  # given back: expired at once, the requeued delivery claims it
            return RunWrite(self.key, RunState.UNKNOWN, self.owner, -1, WriteIf.OWNER)
        return RunWrite(self.key, state, self.owner, self.keep_ms, WriteIf.OWNER)

    def _then(self, ack: Callable[[], Any]) -> Callable[[], Any]:
        def acknowledge() -> None:
            pending, self._pending = self._pending, None
            if pending is None:
                ack()
                return
            self.ahead.end(pending, ack)

        return acknowledge

    def _then_reject(self, reject: Callable[..., Any]) -> Callable[..., Any]:
        def rejected(requeue: bool = False) -> None:
            pending, self._pending = self._pending, None
            if pending is None:
                reject(requeue=requeue)
                return
            self.ahead.end(pending, lambda: reject(requeue=requeue))

        return rejected


def is_prefork(pool: Any) -> bool:
    """Whether ``pool`` is Celery's prefork pool (its tasks run in other processes)."""
    from celery.concurrency.prefork import TaskPool

    return isinstance(pool, TaskPool)


def claimed_ahead(request: Any) -> str | None:
    """The owner of the claim taken ahead for ``request`` (a Celery ``Request``), if any."""
    fields = getattr(request, "_request_dict", None)
    found = fields.get(AHEAD_KEY) if isinstance(fields, dict) else None
    return str(found[0]) if isinstance(found, tuple) else None


def wanted_for(request: Any, runtime: Runtime, guarded: Guarded) -> Wanted | None:
    """The claim to take ahead for ``request``, or None to let it go on as it came."""
    fields = getattr(request, "_request_dict", None)
    if not isinstance(fields, dict) or not guarded(getattr(request, "task", None)):
        return None
    origin = periodic_origin(fields)
    delivery = getattr(request, "delivery_info", None) or {}
    if origin is None or delivery.get("redelivered") or fields.get("is_eager"):
        return None
    key = RunKey(str(request.id), origin.schedule, origin.tick_ms, origin.trigger.value)
    attempt = int(fields.get("retries") or 0)
    return key, runtime().owner(str(request.hostname)), attempt


class ClaimAheadStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Consumer bootstep: wraps the consumer's ``on_task_request`` (in ``__init__``, before
    Celery builds its strategies, which capture it) so ticks are claimed ahead on a worker with
    an event loop; stopping the consumer drops what waits (``ClaimAhead.stop``)."""

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.ahead: ClaimAhead | None = None
        self._worth: bool | None = None
        forward = c.on_task_request
        c.on_task_request = lambda request: self._on_request(c, forward, request)

    def _on_request(self, c: Any, forward: Callable[[Any], Any], request: Any) -> Any:
        from celery_durable_beat.worker import hooks  # hooks adds this step: imported late

        installed = hooks.installation(c.app)
        hub = getattr(c, "hub", None)
        wanted = None
        if installed is not None and hub is not None and self._worth_it(c, installed.runtime):
            wanted = wanted_for(request, installed.runtime, hooks.task_guarded)
        if installed is None or wanted is None:
            return forward(request)
        if self.ahead is None or self.ahead.hub is not hub:
            self.ahead = ClaimAhead(hub, forward, installed.runtime)
            self.ahead.start()
        self.ahead.submit(request, wanted)
        return None

    def _worth_it(self, c: Any, runtime: Runtime) -> bool:
        """Claims are taken ahead by a prefork worker whose claims are the store's rows only
        (module docstring: where it was measured to pay)."""
        if self._worth is None:
            import os as _o
            anypool = _o.environ.get("AHEAD_ANYPOOL") == "1"
            self._worth = (anypool or is_prefork(getattr(c, "pool", None))) and (_o.environ.get("AHEAD_REDIS") == "1" or runtime().runs_shared)
        return self._worth

    def stop(self, c: Any) -> None:
        self._stop_ahead()

    def shutdown(self, c: Any) -> None:
        self._stop_ahead()

    def _stop_ahead(self) -> None:
        if self.ahead is not None:
            self.ahead.stop()
            self.ahead = None
