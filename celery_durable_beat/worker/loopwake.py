"""Callbacks queued on the worker's event loop run at once, not after its poll times out.

Kombu's event loop (``kombu.asynchronous.Hub.create_loop``) runs the callbacks queued with
``hub.call_soon``, then fires its timers, then polls for up to their next deadline (at most
10 s: ``Hub.fire_timers(max_delay=10)``). A callback that itself queues another, from the loop's
own thread, adds it after that batch was taken: it waits for the poll to return. Celery queues
every task's acknowledgement that way (``Consumer.create_task_handler``: ``call_soon_ack``), and
the AMQP transport re-queues its reader after each frame it reads
(``Transport._make_reader``). So on RabbitMQ a ``-P solo`` worker that reads the next message
from that re-queued reader runs the task, queues its ack, and polls: with a prefetch of 1 the
broker sends nothing before the ack, and the worker idles up to 10 s with messages ready. Whether
the next message is already in the socket when the reader runs is a race, which is why the
stall came and went (about ten messages, then 10 s), with or without the guard. Any callback
queued while that batch runs waits the same way, whatever the pool and transport. Upstream:
celery/celery#7718, celery/kombu#1587 (open).

``LoopWake`` (added by ``install(app)`` as the consumer bootstep ``LoopWakeStep``) closes the
gap: a tick callback,
which the loop runs after its timers and right before it polls, checks whether callbacks are
queued and, if so, makes a socket of its own readable, so the poll returns at once and the next
turn of the loop runs them. An idle worker writes nothing: it still sleeps in its poll.
"""

from __future__ import annotations

import socket
from contextlib import suppress
from typing import Any

from celery import bootsteps


class LoopWake:
    """Wakes one hub's poll while callbacks wait in its ready queue (module docstring)."""

    def __init__(self, hub: Any) -> None:
        self.hub = hub
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)

    def attach(self) -> None:
        """Register on the hub; again after a reconnection (``Hub.reset`` drops every reader)."""
        self.hub.add_reader(self._reader, self._drain)
        self.hub.on_tick.add(self._before_poll)

    def close(self) -> None:
        self.hub.on_tick.discard(self._before_poll)
        with suppress(OSError, KeyError, ValueError):
            self.hub.remove_reader(self._reader)
        self._reader.close()
        self._writer.close()

    def _before_poll(self) -> None:
        # ``_ready`` is the hub's queue of call_soon callbacks (a set in every kombu since 4.0);
        # no public API tells whether it holds any.
        if getattr(self.hub, "_ready", None):
            with suppress(OSError):  # full buffer: a wakeup is pending already
                self._writer.send(b"\0")

    def _drain(self) -> None:
        with suppress(OSError):
            self._reader.recv(4096)


class LoopWakeStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Consumer bootstep: a ``LoopWake`` on the worker's hub, attached at every (re)start of the
    consumer. A worker without a hub (``synloop``: gevent, eventlet, a transport without an
    event loop) runs its pending operations before each blocking read and needs none."""

    requires = ("celery.worker.consumer.connection:Connection",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.wake: LoopWake | None = None

    def start(self, c: Any) -> None:
        hub = getattr(c, "hub", None)
        if hub is None:
            return
        if self.wake is None or self.wake.hub is not hub:
            self.wake = LoopWake(hub)
        self.wake.attach()

    def shutdown(self, c: Any) -> None:
        if self.wake is not None:
            self.wake.close()
            self.wake = None
