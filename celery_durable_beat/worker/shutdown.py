"""A warm shutdown waits for the jobs a pool process already holds (SPEC §6).

The contract: SIGTERM to a worker with ``install(app)`` ends it within 5 s after its running
tasks finish, and every message whose task ran is acknowledged. Celery 5.7 with the prefork pool
breaks both now and then (``docs/worker.md`` has the figures and a reproduction):

1. On a warm shutdown the consumer's ``on_close`` calls the pool's ``flush``
   (``celery.worker.consumer.consumer:Consumer.on_close`` ->
   ``celery.concurrency.asynpool:AsynPool.flush``), which drops from the pool's job cache every
   job whose ``ACK`` (the pool process saying "I started it") the main process has not read
   yet: ``job.discard()`` for each job not ``_accepted``, on the premise that "they will be
   redelivered by the broker anyway".
2. A job whose payload was already written into a process's pipe is not a job the broker will
   redeliver: the process reads it and runs it (it reads its pipe until the ``None`` sentinel
   that ``Pool.join`` writes after it). Its ``READY`` then finds no job in the cache, so no
   callback runs: with ``acks_late`` its message is never acknowledged and kombu gives it back
   to the queue, although the task ran.
3. ``Pool.join`` -> ``ResultHandler.on_stop_not_started`` reads the processes' result pipes only
   ``while cache``: with the held jobs dropped the cache is empty (or soon is), so the ``READY``
   of a held job is never read. The process, done, waits in
   ``billiard.pool:Worker._ensure_messages_consumed`` for the main process to count that
   ``READY`` (300 polls of 0.1 s), while the main process waits in ``Pool.join`` for it: 30 s,
   then exits anyway. Past Kubernetes' default 30 s grace the pod is SIGKILLed.

The window is the few milliseconds between writing a job to an idle process and reading its
``ACK``; a worker draining a queue of short tasks is in it at any instant with a good chance.

The remedy, installed by ``install(app)`` as the consumer bootstep ``WarmShutdownStep``: the
worker's ``TaskPool.flush`` is wrapped (on that one object, nothing patched on a class) so that,
when the pool is closing (a warm shutdown: ``Pool.close`` has run; a consumer restart after a
lost connection leaves the pool running and is left as Celery does it), the jobs already written
to a live process stay in the cache, with a partly written payload finished first. The result
handler then reads their ``ACK`` and ``READY`` as for any running job, their callbacks run, and
Celery's own ``prefork.TaskPool.on_stop`` sends their acknowledgements after the join, as it does
for every task that ends during a warm shutdown. Jobs never written to a process are still
dropped, as before: their messages were not run and go back to the queue.

It relies on ``AsynPool`` internals (``_cache``, ``_state``, a job's ``_accepted`` and
``_write_to``, ``_writer``, ``_flush_writer``), so it is applied only on the Celery versions it
was verified on (``CELERY_VERSIONS``) and only when the pool has them; anywhere else the worker
keeps Celery's behaviour and says so in a debug line.
"""

from __future__ import annotations

import logging
from typing import Any

import celery
from celery import bootsteps

from celery_durable_beat.logs import log_extra
from celery_durable_beat.model import Action

log = logging.getLogger("celery_durable_beat.worker")

CELERY_VERSIONS = ((5, 5), (5, 7))
"""The oldest and newest ``(major, minor)`` of Celery whose ``AsynPool.flush`` this was checked
against (the discard of unaccepted jobs and the ``while cache`` drain have been there since
Celery 4; 5.7 is the one measured)."""

_POOL_CLOSE = 1
"""``billiard.pool.CLOSE``: ``Pool.close`` has run, no job is written to a process any more."""

_ATTRIBUTES = ("_cache", "_state", "_flush_writer")


def celery_supported(version: tuple[int, ...] | None = None) -> bool:
    """Whether this Celery's prefork pool is one the remedy was verified on."""
    found = tuple(celery.VERSION[:2]) if version is None else tuple(version[:2])
    return CELERY_VERSIONS[0] <= found <= CELERY_VERSIONS[1]


def held_jobs(pool: Any) -> dict[Any, Any]:
    """The jobs of ``pool`` whose payload a live process has (or is being written) but whose
    ``ACK`` the main process has not read: what ``AsynPool.flush`` would drop yet they run."""
    held = {}
    for job_id, job in list(pool._cache.items()):
        proc = getattr(job, "_write_to", None)
        if getattr(job, "_accepted", True) or proc is None:
            continue
        if proc._is_alive():
            held[job_id] = job
    return held


def _finish_write(pool: Any, job: Any) -> None:
    """Complete a partly written payload (a closing pool's ``flush`` no longer does, and a
    process reading half a job would take the sentinel after it for the rest)."""
    writer_ref = getattr(job, "_writer", None)
    writer = writer_ref() if callable(writer_ref) else None
    if writer is not None and writer in getattr(pool, "_active_writers", ()):
        pool._flush_writer(job._write_to, writer)


class KeepHeldJobs:
    """``TaskPool.flush`` that keeps, once the pool is closing, the jobs processes hold."""

    def __init__(self, taskpool: Any, flush: Any) -> None:
        self.taskpool = taskpool
        self.flush = flush

    def __call__(self) -> Any:
        pool = getattr(self.taskpool, "_pool", None)
        if pool is None or getattr(pool, "_state", None) != _POOL_CLOSE:
            return self.flush()
        held = held_jobs(pool)
        for job in held.values():
            _finish_write(pool, job)
        try:
            return self.flush()
        finally:
            for job_id, job in held.items():
                pool._cache.setdefault(job_id, job)
            if held:
                log.info(
                    "warm shutdown: %d job(s) already in pool processes kept until they end",
                    len(held),
                    extra=log_extra(Action.SHUTDOWN_JOBS_KEPT, jobs=len(held)),
                )


def keep_held_jobs(taskpool: Any) -> bool:
    """Wrap ``taskpool.flush`` (a prefork ``TaskPool`` on a supported Celery); True if done or
    already done."""
    flush = getattr(taskpool, "flush", None)
    if isinstance(flush, KeepHeldJobs):
        return True
    pool = getattr(taskpool, "_pool", None)
    if flush is None or pool is None or not all(hasattr(pool, a) for a in _ATTRIBUTES):
        return False  # not the prefork pool (solo, threads, gevent): nothing is dropped there
    if not celery_supported():
        log.debug(
            "warm shutdown left as Celery %s does it: the remedy is verified on %s to %s",
            celery.__version__,
            *(".".join(map(str, v)) for v in CELERY_VERSIONS),
            extra=log_extra(Action.SHUTDOWN_JOBS_KEPT, jobs=0),
        )
        return False
    taskpool.flush = KeepHeldJobs(taskpool, flush)
    return True


class WarmShutdownStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Consumer bootstep: the worker's pool keeps held jobs through a warm shutdown. Started
    after the pool (the consumer's steps start once the worker's pool is up); idempotent over
    the consumer's restarts."""

    def start(self, c: Any) -> None:
        pool = getattr(c, "pool", None)
        if pool is not None:
            keep_held_jobs(pool)
