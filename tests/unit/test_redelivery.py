"""Redelivery (SPEC §6): the decisions and evidence of ``redelivery.py``, the sweep on the memory
backends, store rule 11 on the memory store, the settings' errors and ``check``'s advice."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from celery_durable_beat.control.check import REDELIVERY_ADVICE, recommend
from celery_durable_beat.dispatch import Dispatcher
from celery_durable_beat.exceptions import ConfigError, StaleEpoch
from celery_durable_beat.ids import tick_task_id
from celery_durable_beat.message import tick_headers
from celery_durable_beat.model import Outcome, Source, Trigger
from celery_durable_beat.policy import ticks_after
from celery_durable_beat.publish.capturing import CapturingPublisher
from celery_durable_beat.redelivery import (
    AbsenceEvidence,
    Decision,
    FifoEvidence,
    Presence,
    RedeliveryPolicy,
    Verdict,
    decide,
    expires_at_ms,
    redelivery_message,
)
from celery_durable_beat.redelivery_sweep import RedeliverySweep
from celery_durable_beat.runs.base import RunKey, Runs
from celery_durable_beat.runs.memory import MemoryRuns
from celery_durable_beat.schedules.validate import validate_entries
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import RedeliveryCandidate
from celery_durable_beat.store.memory import MemoryStore

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_000
AFTER = 10_000
POLICY = RedeliveryPolicy(after_ms=AFTER, max_count=2)


def candidate(**changes: Any) -> RedeliveryCandidate:
    (definition,) = validate_entries({"tick": {"task": "t.x", "schedule": "@every 60s"}})
    base = RedeliveryCandidate(
        record_id=1,
        schedule="tick",
        tick_ms=T0,
        task_id=tick_task_id("tick", T0),
        version=1,
        recorded_at_ms=T0,
        sent_ms=T0,
        redeliveries=0,
        recheck_ms=T0 + AFTER,
        definition=definition,
        schedule_version=1,
    )
    return replace(base, **changes)


def verdict(c: RedeliveryCandidate, now: int, *, claimed: bool = False, lost: bool = False) -> Any:
    return decide(c, POLICY, now, claimed=claimed, lost=lost, rebuildable=True).verdict


def test_a_claimed_tick_is_never_watched_again_whatever_the_evidence() -> None:
    assert verdict(candidate(), T0 + AFTER, claimed=True, lost=True) is Verdict.CLAIMED


def test_no_evidence_waits_a_sweep_and_a_lost_tick_is_sent_after_redeliver_after_only() -> None:
    assert verdict(candidate(), T0 + AFTER - 1, lost=True) is Verdict.WAIT
    waiting = decide(candidate(), POLICY, T0 + AFTER, claimed=False, lost=False, rebuildable=True)
    assert (waiting.verdict, waiting.recheck_ms) == (Verdict.WAIT, T0 + AFTER + POLICY.sweep_ms)
    lost = decide(candidate(), POLICY, T0 + AFTER, claimed=False, lost=True, rebuildable=True)
    assert (lost.verdict, lost.recheck_ms) == (Verdict.LOST, T0 + 2 * AFTER)


def test_a_long_wait_is_looked_at_less_often_a_half_seen_loss_at_the_next_sweep() -> None:
    def recheck(now: int, **flags: bool) -> int | None:
        found = decide(
            candidate(), POLICY, now, claimed=False, lost=False, rebuildable=True, **flags
        )
        assert found.verdict is Verdict.WAIT
        return None if found.recheck_ms is None else found.recheck_ms - now

    assert recheck(T0 + 4 * AFTER) == 2 * AFTER  # half the time it has waited
    assert recheck(T0 + 4 * AFTER, suspect=True) == POLICY.sweep_ms  # absent once: confirm soon
    assert recheck(T0 + 100 * AFTER) == 10 * AFTER  # at most ten times redeliver_after
    assert recheck(T0 + AFTER + 1) == POLICY.sweep_ms  # never sooner than a sweep


def test_a_tick_first_published_longer_ago_than_the_dedup_ttl_is_forgotten() -> None:
    policy = replace(POLICY, horizon_ms=50 * AFTER)
    old = candidate(sent_ms=T0 + 45 * AFTER, redeliveries=1)  # redelivered since, still lost

    def found(now: int) -> Verdict:
        return decide(old, policy, now, claimed=False, lost=True, rebuildable=True).verdict

    assert found(T0 + 50 * AFTER - 1) is Verdict.LOST
    # The guard forgets claims after the dedup TTL: a copy now could run the tick twice.
    assert found(T0 + 50 * AFTER) is Verdict.FORGOTTEN
    assert decide(old, policy, T0 + 50 * AFTER, claimed=False, lost=True, rebuildable=True) == (
        Decision(Verdict.FORGOTTEN, None)  # no longer watched: its record may be pruned
    )


def test_redeliver_after_must_be_shorter_than_the_dedup_ttl() -> None:
    conf = {"durable_beat_redeliver_after": 120, "durable_beat_dedup_ttl": 120}
    with pytest.raises(ConfigError) as caught:
        Settings.from_conf(conf)
    text = str(caught.value)
    assert "durable_beat_redeliver_after = 120" in text and "durable_beat_dedup_ttl" in text
    assert Settings.from_conf({**conf, "durable_beat_redeliver_after": 60}).redeliver_after == 60


def test_redeliveries_are_bounded_by_redeliver_max() -> None:
    assert verdict(candidate(redeliveries=1), T0 + AFTER, lost=True) is Verdict.LOST
    assert verdict(candidate(redeliveries=2), T0 + AFTER, lost=True) is Verdict.EXHAUSTED


def test_never_past_expires_and_the_copy_expires_when_the_first_did() -> None:
    c = candidate()
    expiring = replace(c, definition=replace(c.definition, expires=30.0))  # type: ignore[arg-type]
    assert expires_at_ms(expiring) == T0 + 30_000
    assert verdict(expiring, T0 + 30_000, lost=True) is Verdict.EXPIRED
    message = redelivery_message(expiring)
    assert message is not None and message.task_id == c.task_id
    assert message.options["expires"].timestamp() * 1000 == T0 + 30_000
    next_tick = replace(c, definition=replace(c.definition, expires="next_tick"))  # type: ignore[arg-type]
    assert expires_at_ms(next_tick) == ticks_after(c.definition, T0, 1)[0]  # type: ignore[arg-type]


def test_a_changed_or_deleted_schedule_has_no_message_to_send_again() -> None:
    assert redelivery_message(candidate(schedule_version=2)) is None
    assert redelivery_message(candidate(definition=None, schedule_version=None)) is None
    assert (
        decide(candidate(), POLICY, T0 + AFTER, claimed=False, lost=True, rebuildable=False).verdict
        is Verdict.GONE
    )


def test_absence_needs_two_probes_apart_and_any_sighting_starts_again() -> None:
    absence = AbsenceEvidence(apart_ms=2_000)
    absence.observe("a", Presence.ABSENT, T0)
    assert not absence.lost("a", T0)  # one probe may land in kombu's BRPOP/unacked window
    absence.observe("a", Presence.ABSENT, T0 + 1_000)
    assert not absence.lost("a", T0 + 1_000)
    absence.observe("a", Presence.PRESENT, T0 + 1_500)  # it was in a list or in unacked
    absence.observe("a", Presence.ABSENT, T0 + 2_500)
    assert not absence.lost("a", T0 + 2_500)
    absence.observe("a", Presence.ABSENT, T0 + 4_500)
    assert absence.lost("a", T0 + 4_500)
    absence.observe("a", Presence.UNKNOWN, T0 + 5_000)  # the broker did not answer
    assert not absence.lost("a", T0 + 5_000)


def test_fifo_evidence_is_a_later_tick_of_the_same_queue_claimed_long_ago() -> None:
    fifo = FifoEvidence(after_ms=AFTER)
    queue = ("celery", None)
    fifo.seen_claimed(queue, T0 + 5, T0 + AFTER)  # published after T0, seen claimed
    assert not fifo.lost(queue, T0, T0 + 2 * AFTER - 1)  # not long enough ago
    assert fifo.lost(queue, T0, T0 + 2 * AFTER)
    assert not fifo.lost(queue, T0 + 5, T0 + 3 * AFTER)  # nothing later than itself
    assert not fifo.lost(("other", None), T0, T0 + 3 * AFTER)
    assert not fifo.lost(("celery", 9), T0, T0 + 3 * AFTER)  # another priority


class Probe:
    """The broker as a test says it is: the task ids still on it."""

    def __init__(self) -> None:
        self.held: set[str] = set()
        self.asked: list[Mapping[str, Sequence[str]]] = []

    def presence(self, wanted: Mapping[str, Sequence[str]]) -> dict[str, Presence]:
        self.asked.append(wanted)
        return {
            t: Presence.PRESENT if t in self.held else Presence.ABSENT
            for ids in wanted.values()
            for t in ids
        }

    def close(self) -> None:
        pass


class Beat:
    """A round and a sweep on the memory backends, the clock in the test's hands."""

    def __init__(
        self, *, probe: Probe | None, max_count: int = 2, claims_apart: bool = False
    ) -> None:
        self.now = T0
        self.store = MemoryStore(lambda: self.now)
        self.store.register_epoch(1)
        (definition,) = validate_entries({"tick": {"task": "t.x", "schedule": "@every 60s"}})
        self.store.upsert(definition, Source.CONFIG, T0, T0)
        self.runs = MemoryRuns(self)
        self.claims = MemoryRuns(self) if claims_apart else self.runs  # as Redis claims are
        self.publisher = CapturingPublisher()
        self.sweep = RedeliverySweep(
            self.store,
            self.publisher,
            Runs(claims=self.claims, tracking=self.runs),
            RedeliveryPolicy(AFTER, max_count),
            queue_of=lambda message: "celery",
            probe=probe,
        )
        Dispatcher(self.store, self.publisher, redeliver_after_ms=AFTER).run_round(T0, 1)
        self.task_id = tick_task_id("tick", T0)

    def now_ms(self) -> int:  # the runs' clock
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000

    def at(self, now: int, epoch: int = 1, leads: Callable[[], bool] = lambda: True) -> list[Any]:
        self.now = now
        return list(self.sweep.maybe_sweep(now, epoch, leads))

    def redeliveries(self) -> list[Any]:
        return [e for e in self.store.history("tick", 100) if e.trigger is Trigger.REDELIVER]


def test_a_tick_absent_from_the_broker_twice_is_sent_again_with_its_id_and_recorded() -> None:
    beat = Beat(probe=Probe())
    assert beat.at(T0 + AFTER - 5_000) == []  # not watched yet: one indexed read, nothing due
    assert beat.at(T0 + AFTER - 1) == []  # too soon after that sweep: not even the read
    assert beat.at(T0 + AFTER) == []  # absent once
    (event,) = beat.at(T0 + AFTER + 5_000)  # absent again, 5 s later: lost
    assert (event.trigger, event.outcome, event.task_id) == (
        Trigger.REDELIVER,
        Outcome.ENQUEUED,
        beat.task_id,
    )
    assert [m.task_id for m in beat.publisher.messages] == [beat.task_id, beat.task_id]
    assert beat.publisher.messages[1].trigger is Trigger.AUTO  # the tick's own message
    assert tick_headers(beat.publisher.messages[1]) == tick_headers(beat.publisher.messages[0])
    assert tick_headers(beat.publisher.messages[1])["periodic_task_name"] == "tick"
    assert [e.detail for e in beat.redeliveries()] == [{"redelivery": 1}]
    assert beat.store.find_enqueued(beat.task_id).trigger is Trigger.AUTO  # type: ignore[union-attr]


def test_a_tick_waiting_on_the_broker_or_claimed_is_never_sent_again() -> None:
    probe = Probe()
    beat = Beat(probe=probe)
    probe.held.add(beat.task_id)  # a backlog, or a worker's prefetch (unacked)
    for step in range(10):
        assert beat.at(T0 + AFTER + step * 5_000) == []
    probe.held.clear()
    beat.runs.claim(RunKey(beat.task_id, "tick", T0, "auto"), "w1", 1, 60_000)
    assert beat.at(T0 + AFTER + 60_000) == []
    assert beat.at(T0 + AFTER + 70_000) == []
    assert beat.redeliveries() == []
    assert beat.store.redelivery_candidates(T0 + 10**9, 10) == []  # claimed: not watched


def test_at_most_redeliver_max_copies_each_after_redeliver_after() -> None:
    beat = Beat(probe=Probe(), max_count=2)
    sent = [len(beat.at(T0 + AFTER + step * 1_000)) for step in range(0, 60, 5)]
    assert sum(sent) == 2
    assert [e.detail["redelivery"] for e in reversed(beat.redeliveries())] == [1, 2]
    assert beat.store.redelivery_candidates(T0 + 10**9, 10) == []  # given up


def test_a_full_sweep_sweeps_again_at_the_next_call_not_in_sweep_ms() -> None:
    probe = Probe()
    beat = Beat(probe=probe)
    (other,) = validate_entries({"tock": {"task": "t.x", "schedule": "@every 60s"}})
    beat.store.upsert(other, Source.CONFIG, T0, T0)
    Dispatcher(beat.store, beat.publisher, redeliver_after_ms=AFTER).run_round(T0, 1)
    beat.sweep.limit = 1  # one candidate fills a sweep: two are due
    beat.at(T0 + AFTER)
    beat.at(T0 + AFTER + 1)  # full before: sweeps again now, not in sweep_ms
    asked = [t for wanted in probe.asked for ids in wanted.values() for t in ids]
    assert sorted(asked) == sorted([beat.task_id, tick_task_id("tock", T0)])
    assert beat.at(T0 + AFTER + 2) == [] and len(probe.asked) == 2  # none due now


def test_fifo_without_a_probe_needs_a_later_claim() -> None:
    beat = Beat(probe=None)
    assert beat.at(T0 + AFTER) == []
    assert beat.at(T0 + 10 * AFTER) == []  # nothing later was ever claimed: a backlog
    assert beat.redeliveries() == []


def test_a_stale_leader_sweeps_nothing_into_the_store() -> None:
    beat = Beat(probe=Probe())
    beat.at(T0 + AFTER)
    beat.store.register_epoch(2)
    with pytest.raises(StaleEpoch):
        beat.at(T0 + AFTER + 5_000, epoch=1)
    assert beat.redeliveries() == []


def test_a_tick_whose_claim_lapsed_with_its_worker_is_never_sent_again() -> None:
    # Claims apart from tracking (Redis): the worker claimed the tick, ran it and died before
    # its run state reached tracking; its claim lapsed after run_ttl. Absent from the broker
    # (acknowledged) and in no tracking row, it is still no lost tick: sent again, it would run
    # twice. The claims remember it was claimed (rule 6, ever_claimed).
    beat = Beat(probe=Probe(), claims_apart=True)
    assert beat.claims.claim(RunKey(beat.task_id, "tick", T0, "auto"), "dead", 0, 1_000) is None
    beat.at(T0 + AFTER)
    assert beat.claims.state(beat.task_id) is None  # lapsed
    assert beat.at(T0 + AFTER + 5_000) == []
    assert beat.at(T0 + 5 * AFTER) == []
    assert [m.task_id for m in beat.publisher.messages] == [beat.task_id]  # the first only


def test_a_leader_whose_lease_lapsed_during_the_sweep_publishes_nothing() -> None:
    beat = Beat(probe=Probe())
    beat.at(T0 + AFTER)  # absent once
    asked: list[int] = []

    def lapsed() -> bool:  # the lease ran out while the sweep read and probed
        asked.append(1)
        return False

    assert beat.at(T0 + AFTER + 5_000, leads=lapsed) == []
    assert asked, "the lease is asked before the publish"
    assert [m.task_id for m in beat.publisher.messages] == [beat.task_id]  # the first only
    assert beat.redeliveries() == []
    (event,) = beat.at(T0 + AFTER + 10_000)  # the next sweep of a leader: still lost, sent
    assert event.task_id == beat.task_id
    assert [m.task_id for m in beat.publisher.messages] == [beat.task_id, beat.task_id]


@pytest.mark.parametrize(
    ("conf", "words"),
    [
        ({"durable_beat_redeliver_after": 0}, "greater than 0"),
        ({"durable_beat_redeliver_after": "soon"}, "number of seconds"),
        ({"durable_beat_redeliver_max": -1}, "0 or more"),
        ({"durable_beat_redeliver_max": 1.5}, "whole number"),
    ],
)
def test_bad_redelivery_settings_name_the_setting_the_problem_and_the_fix(
    conf: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_conf(conf)
    text = str(caught.value)
    assert next(iter(conf)) in text and words in text


def test_check_recommends_redelivery_on_a_redis_broker_only() -> None:
    class App:
        def __init__(self, broker: str) -> None:
            self.conf = {"broker_url": broker}

    unset = Settings.from_conf({})
    assert recommend(App("redis://h:6379/0"), unset) == (REDELIVERY_ADVICE,)
    assert recommend(App("amqp://guest@h//"), unset) == ()
    on = Settings.from_conf({"durable_beat_redeliver_after": 60})
    assert recommend(App("redis://h:6379/0"), on) == ()


def test_every_read_surface_shows_a_redelivery_as_trigger_redeliver() -> None:
    from celery_durable_beat.cli import format as cli_format
    from celery_durable_beat.control import views

    beat = Beat(probe=Probe())
    beat.at(T0 + AFTER)
    beat.at(T0 + AFTER + 5_000)
    shown = [views.event_view(e) for e in beat.store.history("tick", 10)]
    assert [v.trigger for v in shown] == ["redeliver", "auto"]
    assert shown[0].to_json()["trigger"] == "redeliver"
    table = cli_format.history_table(views.HistoryPage(events=tuple(shown), next_cursor=None))
    assert "redeliver" in table[1]


def test_metrics_count_redeliveries_as_their_own_counter_and_as_ticks() -> None:
    from celery_durable_beat.clock import SystemClock
    from celery_durable_beat.metrics import BeatMetrics, SpecRegistry

    registry = SpecRegistry()
    metrics = BeatMetrics(registry, store=MemoryStore(), clock=SystemClock())
    assert registry.get_sample_value("durable_beat_redelivered_total") == 0
    beat = Beat(probe=Probe())
    beat.at(T0 + AFTER)
    metrics.redelivered(beat.at(T0 + AFTER + 5_000))
    assert registry.get_sample_value("durable_beat_redelivered_total") == 1
    labels = {"outcome": "enqueued", "reason": "", "trigger": "redeliver"}
    assert registry.get_sample_value("durable_beat_ticks_total", labels) == 1
