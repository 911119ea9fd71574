"""Two apps, two namespaces, one PostgreSQL store and one Redis database (SPEC §16), with real
processes: each app runs its own pair of beats (the lease in that Redis), both namespaces lead at
once, a kill -9 of one namespace's leader hands over inside that namespace alone, and one worker
pool (its app in the default namespace, ``install(app)``) runs every tick of both exactly once.

Both apps name their schedule ``pulse``: before namespaces they shared one lease (one app's beat
never led) and one task id per tick (the guard refused one app's tick as the other's duplicate).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.store.sql import SqlStore
from tests.support.procs import CeleryProcess, wait_until
from tests.support.rig import ProcessRig, rig_factory

pytestmark = pytest.mark.reliability

SCHEDULE = {"pulse": {"task": "procapp.record", "schedule": "@every 1s"}}
NAMESPACES = ("alpha", "beta")


@pytest.fixture
def rigs(tmp_path: Path, pg_url: str, private_redis: str) -> Iterator[dict[str, ProcessRig]]:
    """A rig per namespace (its beats) and one for the shared worker (default namespace), all
    on one store and one Redis (broker, lease and claims)."""
    with rig_factory(tmp_path, ProcessRig) as make:
        common: dict[str, Any] = {"lease_url": private_redis, "lease_ttl": 2.0, "poll": 0.2}
        made = {
            ns: make(pg_url, private_redis, schedule=SCHEDULE, namespace=ns, app_main=f"app_{ns}",
                     **common)
            for ns in NAMESPACES
        }  # fmt: skip
        made["worker"] = make(pg_url, private_redis, **common)
        yield made


def status(rig: ProcessRig, namespace: str) -> Any:
    app = Celery(f"status_{namespace}", broker=rig.broker_url, set_as_current=False)
    app.conf.update(
        durable_beat_url=rig.store_url,
        durable_beat_lease_url=rig.env["BEAT_LEASE_URL"],
        durable_beat_namespace=namespace,
    )
    try:
        with DurableBeat(app) as control:
            return control.status()
    finally:
        app.close()


def leader_process(rig: ProcessRig, namespace: str) -> CeleryProcess | None:
    """The beat of ``rig`` the namespace's lease names (``hostname:pid``), if alive."""
    holder = status(rig, namespace).leader
    if not holder:
        return None
    pid = int(holder.rsplit(":", 1)[1])
    return next((b for b in rig.beats if b.proc.pid == pid and b.alive()), None)


def enqueued_ids(rig: ProcessRig, namespace: str) -> list[str]:
    store = SqlStore(rig.store_url, namespace=namespace)
    try:
        events = store.history("pulse", 100)
    finally:
        store.close()
    return [e.task_id for e in events if e.outcome.value == "enqueued" and e.task_id]


@pytest.mark.timeout(180)
def test_two_namespaces_lead_at_once_fail_over_apart_and_share_one_worker_pool(
    rigs: dict[str, ProcessRig],
) -> None:
    worker = rigs["worker"].worker("prefork", 2, ready=False)
    for ns in NAMESPACES:
        rigs[ns].beat(f"{ns}-1")
        rigs[ns].beat(f"{ns}-2")
    leaders = {
        ns: wait_until(lambda ns=ns: leader_process(rigs[ns], ns), 30, f"a leader of {ns}")
        for ns in NAMESPACES
    }
    both = {ns: status(rigs[ns], ns) for ns in NAMESPACES}
    assert all(view.leader for view in both.values()), both  # both lead at the same time
    wait_until(lambda: all(len(enqueued_ids(rigs[ns], ns)) >= 3 for ns in NAMESPACES), 30, "ticks")

    beta_before = status(rigs["beta"], "beta")
    leaders["alpha"].kill()  # kill -9 of alpha's leader only
    standby = next(b for b in rigs["alpha"].beats if b is not leaders["alpha"])
    wait_until(lambda: leader_process(rigs["alpha"], "alpha") is standby, 30, "alpha's takeover")
    alpha_after = status(rigs["alpha"], "alpha")
    assert alpha_after.epoch > both["alpha"].epoch
    beta_after = status(rigs["beta"], "beta")
    assert (beta_after.leader, beta_after.epoch) == (beta_before.leader, beta_before.epoch)
    count = len(enqueued_ids(rigs["alpha"], "alpha"))
    wait_until(lambda: len(enqueued_ids(rigs["alpha"], "alpha")) >= count + 3, 30, "alpha again")

    for ns in NAMESPACES:
        for beat in rigs[ns].beats:
            if beat.alive():
                assert beat.stop() == 0, beat.tail()
    wanted = {ns: set(enqueued_ids(rigs[ns], ns)) for ns in NAMESPACES}
    every = wanted["alpha"] | wanted["beta"]
    worker_rig = rigs["worker"]
    wait_until(
        lambda: every <= {r["id"] for r in worker_rig.rows("run")}, 60, "every tick of both run"
    )
    runs = Counter(r["id"] for r in worker_rig.rows("run"))
    assert [i for i, n in runs.items() if n > 1] == [], "a tick ran twice"
    assert set(runs) == every, "a run of a tick no namespace recorded"
    for ns in NAMESPACES:
        assert all(i.startswith(f"{ns}:pulse@") for i in wanted[ns]), wanted[ns]
        headers = {r["headers"]["periodic_namespace"] for r in worker_rig.rows("run")
                   if r["id"] in wanted[ns]}  # fmt: skip
        assert headers == {ns}
    assert worker.alive(), worker.tail()
    for ns in NAMESPACES:
        logs = "".join(b.output() for b in rigs[ns].beats)
        assert "Traceback" not in logs, logs[-3000:]
