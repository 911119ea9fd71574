"""What one claim costs with the claims in Redis: through redis-py's ``Script`` and through
``runs/redis_lua.py``'s ``LuaScript`` (SPEC §6: the guard's cost per tick is small; issue 24).

Each line claims N fresh ticks, each call carrying the previous tick's end (as a guarded worker
under load does), with the product's claim script, in one process, and reports per claim: the
wall time, this process's CPU and the Redis server's CPU (read from ``/proc``, so the server
must run on this machine). ``gap`` spins that long on the CPU between claims, as a worker does
between tasks (the server then sleeps between calls, and its wake-up is paid again). The two
ways alternate, three rounds by default, so a drift of the machine shows between rounds.

    .venv/bin/python bench/redis_claim_cost.py             # 3,000 claims a line
    .venv/bin/python bench/redis_claim_cost.py --claims 1000

Redis comes from ``DURABLE_BEAT_TEST_REDIS`` (its database is flushed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import procstat
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from celery_durable_beat.runs import redis as claims_module  # noqa: E402
from celery_durable_beat.runs.base import RunKey, RunState, RunWrite, WriteIf  # noqa: E402
from celery_durable_beat.runs.redis import RedisClaims  # noqa: E402

REDIS = os.environ.get("DURABLE_BEAT_TEST_REDIS", "redis://127.0.0.1:6379/14")


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def measure(claims: RedisClaims, count: int, gap_s: float, server: int) -> tuple[float, ...]:
    """µs a claim: wall, this process's CPU, the server's CPU (the gaps taken out)."""
    previous: list[RunWrite] = []
    wall, cpu, other = time.perf_counter(), time.process_time(), procstat.cpu_of(server)
    for i in range(count):
        spin(gap_s)
        key = RunKey(uuid.uuid4().hex, "bench", i, "schedule")
        owner = f"bench:1:{uuid.uuid4().hex[:12]}"
        if claims.claim(key, owner, 0, 60_000, previous) is not None:
            raise SystemExit("a fresh tick was refused")
        previous = [RunWrite(key, RunState.SUCCEEDED, owner, 600_000, WriteIf.OWNER)]
    spent = gap_s * count
    wall = time.perf_counter() - wall - spent
    cpu = time.process_time() - cpu - spent
    return wall / count * 1e6, cpu / count * 1e6, (procstat.cpu_of(server) - other) / count * 1e6


def through_script(claims: RedisClaims) -> None:
    """The scripts as they were: redis-py's ``register_script``."""
    client = claims.client
    claims._claim = client.register_script(claims_module._CLAIM)


WAYS: dict[str, Callable[[RedisClaims], Any]] = {
    "redis-py's Script": through_script,
    "LuaScript": lambda _claims: None,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=3000, help="claims a line")
    parser.add_argument("--rounds", type=int, default=3, help="times each way is measured")
    args = parser.parse_args()
    admin = redis.Redis.from_url(REDIS)
    admin.flushdb()
    server = int(admin.info("server")["process_id"])
    print(f"load {os.getloadavg()}; {args.claims} claims a line; µs a claim")
    print("| round | way | gap between claims | wall | this process's CPU | Redis's CPU |")
    print("|---|---|---|---|---|---|")
    for round_ in range(1, args.rounds + 1):
        for name, prepare in WAYS.items():
            for gap_s in (0.0, 0.001):
                claims = RedisClaims(REDIS)
                prepare(claims)
                measure(claims, 100, 0.0, server)  # connect, load the script
                wall, cpu, other = measure(claims, args.claims, gap_s, server)
                claims.close()
                gap = f"{gap_s * 1000:g} ms"
                print(f"| {round_} | {name} | {gap} | {wall:.0f} | {cpu:.0f} | {other:.0f} |")
    admin.flushdb()
    admin.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
