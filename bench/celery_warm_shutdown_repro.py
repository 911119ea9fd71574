"""Celery 5.7 prefork: a warm shutdown hangs ~30 s and leaves messages of tasks that ran unacked.

A reproduction with plain Celery only (nothing of celery_durable_beat), for an upstream report.
This file is both the Celery app and the driver. Each trial publishes 1,000 messages of a 20 ms
``acks_late`` task to a Redis broker, starts ``celery worker -P prefork -c 2 -l WARNING``
(defaults otherwise), sends SIGTERM once a random number of them has run, and reports how long
the worker took to exit and how many messages whose task ran are back in the queue or in
kombu's ``unacked`` hash:

    python bench/celery_warm_shutdown_repro.py --broker redis://127.0.0.1:6379/15 --trials 10

Its database is flushed. On Celery 5.7.0 / billiard 4.3.2 / kombu 5.7.0 about a third of trials
take ~32 s (both pool processes in ``billiard.pool:Worker._ensure_messages_consumed``, the main
process in ``Pool.join``) and leave 1-2 already-run messages unacknowledged; a few more trials
exit in ~2 s yet leave one unacknowledged.

Cause: ``Consumer.on_close`` -> ``AsynPool.flush`` discards every job whose ACK the main process
has not read yet, including a job already written to an idle process's pipe. The process runs
it anyway (it reads its pipe up to the sentinel ``Pool.join`` writes), but with the job gone
from the cache its result has no callback (the ``acks_late`` ack is never sent) and
``ResultHandler.on_stop_not_started`` stops reading result pipes once the cache is empty
(``while cache and outqueues``), so the process's READY is never counted and it polls
``_ensure_messages_consumed`` for 300 x 0.1 s before it exits.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis
from celery import Celery

BROKER = os.environ.get("REPRO_BROKER", "redis://127.0.0.1:6379/15")
RAN = "repro:ran"
CELERY = (sys.executable, "-m", "celery")

app = Celery("celery_warm_shutdown_repro", broker=BROKER)
app.conf.task_ignore_result = True


@app.task(name="repro.work", bind=True, acks_late=True)
def work(self) -> None:
    time.sleep(0.02)
    redis.Redis.from_url(BROKER).zadd(RAN, {self.request.id: time.time()})


def left_in_broker(client: redis.Redis) -> set[str]:
    found = {json.loads(raw)["headers"]["id"] for raw in client.lrange("celery", 0, -1)}
    found |= {json.loads(raw)[0]["headers"]["id"] for raw in client.hvals("unacked")}
    return found


def trial(broker: str, term_after: int, count: int) -> dict[str, float | int]:
    client = redis.Redis.from_url(broker)
    client.flushdb()
    sender = Celery("repro-sender", broker=broker, set_as_current=False)
    with sender.producer_or_acquire() as producer:
        for _ in range(count):
            sender.send_task("repro.work", task_id=str(uuid.uuid4()), producer=producer)
    here = Path(__file__).resolve().parent
    worker = subprocess.Popen(
        [*CELERY, "-A", Path(__file__).stem, "worker", "-P", "prefork", "-c", "2", "-l", "WARNING"],
        cwd=here,
        env={**os.environ, "REPRO_BROKER": broker, "PYTHONPATH": str(here)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while client.zcard(RAN) < term_after and time.monotonic() < deadline:
        time.sleep(0.01)
    sent = time.time()
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=120)
    exited = time.time()
    ran = dict(client.zrange(RAN, 0, -1, withscores=True))
    ran_ids = {k.decode() for k in ran}
    return {
        "term_after": term_after,
        "exit_s": round(exited - sent, 2),
        "after_last_task_s": round(exited - max(ran.values()), 2),
        "ran_but_unacked": len(ran_ids & left_in_broker(client)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", default=BROKER, help="a Redis URL; its database is flushed")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    import billiard
    import celery
    import kombu

    print(
        f"celery {celery.__version__}, billiard {billiard.__version__}, kombu {kombu.__version__}"
    )
    bad = 0
    for _ in range(args.trials):
        row = trial(args.broker, rng.randrange(20, int(args.count * 0.9)), args.count)
        bad += row["after_last_task_s"] > 5 or row["ran_but_unacked"] > 0
        print(json.dumps(row), flush=True)
    print(f"{bad} of {args.trials} trials hung over 5 s or left already-run messages unacked")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
