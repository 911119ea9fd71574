"""A store made by the previous release, as its users made theirs: a script the old code runs.

``tests/migration/test_upgrade_from_previous_release.py`` extracts the package of the release
before namespaces (commit d14abd6, schema revision 0005) with ``git archive`` and runs this file
with ``PYTHONPATH=<that package's folder>:<the project's folder>``, so every import of
``celery_durable_beat`` below is the old code (checked first: a run that picked up the new code
would prove nothing). It imports nothing of ``tests`` (the repository root, where the new code
lives, is not on its path), and nothing of the package at its top: the test imports its constants
and ``dump_tables`` to read the upgraded store the same way.

The project is ``proj`` (the test writes ``proj.py``: ``CONF``, the settings of its Celery app
``app`` with ``durable_beat_url`` and ``beat_schedule``, and ``T0_MS``, a whole hour some five
hours before now). Time is a parameter, as in that release's ``FrozenBeat``: config sync and the
rounds run at instants after ``T0_MS`` and all in the past, so the schedules are overdue when the
test reads them and every value compared before and after the upgrade is fixed (each config
schedule ends at ``T0 + 3 h``). What the release does, through the entry points a user or the
release's own beat used:

- ``SqlStore(url).migrate()`` (the release's ``migrate`` verb) creates schema 0005;
- the store lease (``StoreLease``) is taken by one beat, released, then taken and *held* by a
  second one: the fence row's epoch is 2 with a holder, a token and an expiry an hour on;
- config sync (``sync_definitions``, what the release's leader did once per epoch) at ``T0`` with
  a first version of ``report``, then at ``T0 + 5 min`` with the project's config (``report`` at
  version 2);
- beat's rounds (``Dispatcher`` with a ``CapturingPublisher``, at each due instant as
  ``FrozenBeat`` does) until ``T0 + 1 h``; beat is down until one round at ``T0 + 1 h 40 min``
  (``report`` backfills its missed ticks, ``Nightly Cleanup`` skips one), then down for good;
- a worker's traces: run rows (succeeded, failed, one still started) through the release's run
  tracking, and its presence row (``announce_worker``);
- an operator (``DurableBeat(app)``, the release's control API): an API schedule upserted twice,
  paused and resumed with reasons; a second one paused and left paused; ``report``'s missed
  window backfilled (``T0 + 1 h 50 min`` to ``T0 + 2 h 10 min``: ticks the next round would
  otherwise send again); ``Nightly Cleanup`` triggered with an idempotency key.

It prints one JSON object: the package it ran, the revision, the lease, the task ids published,
what the release's public API showed (``list``, ``get``, ``next_ticks``, ``history``, ``actions``,
``status``) and every table's rows read with plain SQL (``SELECT *``, ordered by primary key).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from typing import Any

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
KEEP_MS = 7 * 24 * HOUR_MS
"""How long the run rows written here hold their state: past the test, so none expires."""
LEASE_TTL_S = 3600.0
"""The held lease outlives the test: the upgraded store still names its leader."""
NAMES = ("Nightly Cleanup", "adhoc", "frozen", "report")
TABLES = {
    "durable_beat_alembic_version": "version_num",
    "durable_beat_schedules": "id",
    "durable_beat_audit": "id",
    "durable_beat_fence": "id",
    "durable_beat_runs": "task_id",
    "durable_beat_workers": "hostname",
    "durable_beat_actions": "id",
}
"""Every table of schema 0005 and the primary key its rows are dumped in the order of."""


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _iso(ms: int) -> str:
    return _dt(ms).isoformat().replace("+00:00", "Z")


def dump_tables(url: str, tables: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Every row of ``tables`` as the database returns it to plain SQL, in primary key order."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                table: [
                    dict(row._mapping)
                    for row in conn.execute(text(f"SELECT * FROM {table} ORDER BY {key}"))
                ]
                for table, key in tables.items()
            }
    finally:
        engine.dispose()


def _the_old_package(expected_root: str) -> str:
    import celery_durable_beat

    where = os.path.realpath(celery_durable_beat.__file__)
    if not where.startswith(os.path.realpath(expected_root) + os.sep):
        raise SystemExit(f"celery_durable_beat came from {where}, not from {expected_root}")
    return where


def _app(conf: dict[str, Any]) -> Any:
    from celery import Celery

    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(conf)
    return app


def _rounds(dispatcher: Any, store: Any, now_ms: int, until_ms: int, epoch: int) -> int:
    """Beat running on a punctual clock from ``now_ms`` to ``until_ms``: a round at each due
    instant (``FrozenBeat.advance``); the time reached."""
    while (due := store.earliest_due_ms()) is not None and due <= until_ms:
        now_ms = max(now_ms, due)
        dispatcher.run_round(now_ms, epoch=epoch)
    return until_ms


def _runs(url: str, published: list[Any]) -> None:
    """A worker's traces of three ticks, through the release's run tracking (the worker
    guard's port): one succeeded, one failed, one still running; and the worker's presence."""
    from celery_durable_beat.runs.base import RunKey, RunState, RunWrite
    from celery_durable_beat.runs.factory import make_tracking

    tracking = make_tracking(url)
    owner = "celery@old-worker:4242"
    ends = [RunState.SUCCEEDED, RunState.FAILED, None]
    try:
        for message, end in zip(published, ends, strict=True):
            key = RunKey(message.task_id, message.schedule, message.tick_ms, "auto")
            refused = tracking.claim(key, owner, 0, KEEP_MS)
            assert refused is None, f"the claim of {message.task_id} was refused: {refused}"
            if end is not None:
                assert tracking.settle(RunWrite(key, end, owner, KEEP_MS))
        tracking.announce_worker("celery@old-worker", ["celery", "maintenance"])
    finally:
        tracking.close()


def _operator(app: Any, t0: int) -> Any:
    """What an operator did through the release's ``DurableBeat``; the publisher it used."""
    from celery_durable_beat import DurableBeat
    from celery_durable_beat.publish.capturing import CapturingPublisher

    publisher = CapturingPublisher()
    adhoc = {"task": "proj.adhoc", "schedule": "@every 1h", "start_at": _iso(t0 + 48 * HOUR_MS)}
    with DurableBeat(app, publisher=publisher, actor="python:ops@old-host") as beat:
        assert beat.upsert("adhoc", {**adhoc, "kwargs": {"n": 1}}, reason="first cut") == "created"
        assert beat.upsert("adhoc", {**adhoc, "kwargs": {"n": 2}}, reason="n is 2") == "updated"
        beat.pause("adhoc", reason="hold it during the upgrade window")
        beat.resume("adhoc", reason="window over")
        frozen = {"task": "proj.frozen", "schedule": "0 6 * * 1", "tz": "Europe/Berlin"}
        assert beat.upsert("frozen", frozen) == "created"
        beat.pause("frozen", reason="stays paused across the upgrade")
        filled = beat.backfill(
            "report", _dt(t0 + 110 * MINUTE_MS), _dt(t0 + 130 * MINUTE_MS), reason="beat was down"
        )
        assert len(filled.ticks) == 3, filled
        run = beat.trigger("Nightly Cleanup", idempotency_key="deploy-42", reason="after deploy")
        assert run.created
    return publisher


def _views(app: Any, t0: int) -> dict[str, Any]:
    """What the release's public API showed of the store, as JSON."""
    from celery_durable_beat import DurableBeat

    after = _dt(t0 + 145 * MINUTE_MS)
    with DurableBeat(app) as beat:
        return {
            "list": [view.to_json() for view in beat.list()],
            "get": {n: beat.get(n, count=3).to_json() for n in NAMES},
            "get_after": {n: beat.get(n, count=3, after=after).to_json() for n in NAMES},
            "next_ticks": {
                n: [tick.to_json() for tick in beat.next_ticks(n, 3, after=after)] for n in NAMES
            },
            "history": {n: beat.history(n, limit=100).to_json() for n in NAMES},
            "actions": beat.actions(limit=100).to_json(),
            "actions_of": {n: beat.actions(n, limit=100).to_json() for n in NAMES},
            "status": beat.status().to_json(),
        }


def main(expected_root: str) -> dict[str, Any]:
    package = _the_old_package(expected_root)
    import proj  # type: ignore[import-not-found]  # the test's project, on PYTHONPATH

    from celery_durable_beat.celery_config import definitions_from_app
    from celery_durable_beat.dispatch import Dispatcher
    from celery_durable_beat.lease.sql import StoreLease
    from celery_durable_beat.publish.capturing import CapturingPublisher
    from celery_durable_beat.settings import Settings
    from celery_durable_beat.store.sql import SqlStore
    from celery_durable_beat.sync import sync_definitions

    conf, t0 = proj.CONF, int(proj.T0_MS)
    app = _app(conf)
    settings = Settings.from_conf(app.conf, environ={})
    first_cut = json.loads(json.dumps(conf["beat_schedule"]))
    first_cut["report"]["kwargs"] = {**first_cut["report"]["kwargs"], "v": 1}
    store = SqlStore(settings.url, stall_timeout_s=settings.lease_ttl)
    try:
        revision = store.migrate()
        earlier = StoreLease(store, LEASE_TTL_S, holder="old-beat-a:101")
        assert earlier.acquire_or_renew().epoch == 1
        earlier.release()
        lease = StoreLease(store, LEASE_TTL_S, holder="old-beat-b:202")
        held = lease.acquire_or_renew()
        assert held.leader and held.epoch == 2, held
        epoch = held.epoch
        old_app = _app({**conf, "beat_schedule": first_cut})
        sync_definitions(store, definitions_from_app(old_app, settings), t0, epoch=epoch)
        now = t0 + 5 * MINUTE_MS
        report = sync_definitions(store, definitions_from_app(app, settings), now, epoch=epoch)
        assert report.updated == ["report"], report
        publisher = CapturingPublisher()
        dispatcher = Dispatcher(
            store,
            publisher,
            batch_size=settings.batch_size,
            quarantine_after=settings.quarantine_after,
        )
        now = _rounds(dispatcher, store, now, t0 + HOUR_MS, epoch)
        dispatcher.run_round(t0 + 100 * MINUTE_MS, epoch=epoch)  # beat back for one round
        by_name = {m.task_id: m for m in publisher.messages}
        traced = [by_name[f"report@{_iso(t0 + m * MINUTE_MS)}"] for m in (10, 20)]
        last_cleanup = [m for m in publisher.messages if m.schedule == "Nightly Cleanup"][-1]
        _runs(settings.url, [*traced, last_cleanup])
        operator = _operator(app, t0)
    finally:
        store.close()
    return {
        "package": package,
        "revision": revision,
        "lease": {"holder": lease.holder, "token": lease.token, "epoch": epoch},
        "published": [m.task_id for m in publisher.messages],
        "operator_published": [m.task_id for m in operator.messages],
        "views": _views(app, t0),
        "tables": dump_tables(settings.url, TABLES),
    }


if __name__ == "__main__":
    json.dump(main(sys.argv[1]), sys.stdout, default=str, sort_keys=True)
