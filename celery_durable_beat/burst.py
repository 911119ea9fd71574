"""A burst: rounds back to back while each claims a full batch, each round's ``settle`` on a
thread of its own beside the next round's claim (store rule 12).

Why: in a burst of thousands of due ticks the leader used to wait for the store twice a batch,
for the settle (the batch's records and advances, most of a round's time in PostgreSQL) and
then for the next claim. Now the settle of round k runs while the main thread reads and plans
round k+1 (its rows, its ``enqueued`` check) — rows other than round k's, which stay due until
k's settle commits, so the claim leaves them out.

What a single round promises (``dispatch.py``) holds for each round of a burst: its ticks are
published before their records and advances are written, its settle is one fenced transaction
with its compare-and-set, and a crash at any instant replays at most ticks that have no record
yet, under their own task ids (SPEC §4) — here those of the round being settled and of the one
claimed beside it, which has published nothing. The gate's calls keep their order too: round
k+1 publishes (and its ``begin_round`` runs) only once round k's settle has answered and
``finish`` has told the gate, so no gate rule changes. A failed settle fails the burst; the
round claimed beside it is dropped unpublished.

A burst ends when a round claims less than a full batch, when the broker fails, or when
``go_on`` says so (the lease, the loop's time budget: a burst never keeps beat from a SIGTERM
for long: it waits for at most the budget and the round in flight); each round of it is
settled before ``run`` returns, also when it raises (``finished`` then says what was).

Python's cyclic garbage collector is paused while ``run`` runs (and left as it was after):
a round holds thousands of short-lived objects, none of them in a cycle, and their number set
off full collections, each walking every object of the process (Celery's, kombu's,
SQLAlchemy's: over 100,000), several times a burst — about a tenth of a burst's CPU, measured
(docs/benchmarks.md). Reference counting frees the rounds' objects as before; the collector
runs again as soon as ``run`` returns (``beat_loop.BURST_BUDGET_S`` and the round in flight).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from celery_durable_beat.dispatch import Dispatcher, OpenRound, RoundStats
from celery_durable_beat.logs import cause, log_extra
from celery_durable_beat.model import Action

log = logging.getLogger("celery_durable_beat.dispatch")


class BurstRounds:
    """The rounds of a burst for one beat process; its settling thread starts on first use."""

    def __init__(self, dispatcher: Dispatcher, now_ms: Callable[[], int]) -> None:
        self.dispatcher = dispatcher
        self._now_ms = now_ms
        self._pool: ThreadPoolExecutor | None = None
        self.finished = RoundStats()
        """The rounds of the last ``run`` that were settled and finished, also when it raised
        (their records are committed: the loop counts them in its metrics and pruning)."""

    def run(self, now_ms: int, epoch: int, go_on: Callable[[], bool]) -> RoundStats:
        """Rounds from ``now_ms`` on while each claims a full batch and ``go_on()``; what they
        did, together (``RoundStats.add``). Raises what a round raises, every round before it
        finished and none left settling."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run(now_ms, epoch, go_on)
        finally:
            if collecting:
                gc.enable()

    def _run(self, now_ms: int, epoch: int, go_on: Callable[[], bool]) -> RoundStats:
        rounds = self.dispatcher
        total = self.finished = RoundStats()
        rnd = OpenRound(now_ms)
        try:
            rounds.claim(rnd)
        except BaseException:
            rounds.abandon(rnd)
            raise
        while rnd.stats.claimed:
            try:
                rounds.publish(rnd)
            except BaseException:
                rounds.abandon(rnd)
                raise
            settling = self._beside(rnd, epoch, go_on)
            if settling is None:
                total.add(self._settle_now(rnd, epoch))
                return total
            following = OpenRound(0)
            try:
                following.now_ms = self._now_ms()
                rounds.claim(following, rnd.schedule_ids())
            except BaseException:
                total.add(self._join(rnd, settling))  # its own failure, if any, is raised
                raise
            total.add(self._join(rnd, settling))
            rnd = following
        total.add(rnd.stats)
        return total

    def close(self) -> None:
        """Stop the settling thread (none is in flight between bursts); idempotent."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _beside(
        self, rnd: OpenRound, epoch: int, go_on: Callable[[], bool]
    ) -> Future[list[bool]] | None:
        """The round's settle, started on the settling thread, if it may run beside the next
        round's claim; None to settle it in turn (the burst ends there)."""
        stats = rnd.stats
        if not (
            stats.more_due
            and not stats.broker_unavailable
            and self.dispatcher.store.settles_beside_claims
            and go_on()
        ):
            return None
        try:  # the thread starts on first use: a process at its thread limit settles in turn
            pool = self._settler()
            return pool.submit(self.dispatcher.store.settle, stats.events, rnd.advances, epoch)
        except RuntimeError as exc:
            log.warning(
                "a burst's rounds are settled in turn: no settling thread (%s)",
                cause(exc),
                extra=log_extra(Action.ROUND_FAILED),
            )
            self.close()
            return None

    def _settle_now(self, rnd: OpenRound, epoch: int) -> RoundStats:
        rounds = self.dispatcher
        try:
            applied = rounds.store.settle(rnd.stats.events, rnd.advances, epoch)
        except BaseException:
            rounds.abandon(rnd)
            raise
        return rounds.finish(rnd, applied)

    def _join(self, rnd: OpenRound, settling: Future[list[bool]]) -> RoundStats:
        """Wait for the round's settle; finish the round, or abandon it and raise. Whatever
        interrupts the wait (a KeyboardInterrupt), the settle's own outcome decides the round:
        it is waited for, so no settle outlives ``run``."""
        try:
            applied = settling.result()
        except BaseException:
            wait([settling])
            if settling.exception() is None:
                self.finished.add(self.dispatcher.finish(rnd, settling.result()))
            else:
                self.dispatcher.abandon(rnd)
            raise
        return self.dispatcher.finish(rnd, applied)

    def _settler(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="durable-beat-settle")
        return self._pool
