"""The chaos tests' seed and trial count (``tests/reliability/test_chaos.py``), read once.

``DURABLE_BEAT_CHAOS_SEED`` fixes the seed (a run prints it in its header and in every failure,
so a failing run is replayed with the same value); unset, a random one is drawn here.
``DURABLE_BEAT_CHAOS_TRIALS`` sets the trials per scenario of the short (CI) version; the
``slow`` version runs ``DURABLE_BEAT_CHAOS_SLOW_TRIALS`` (default 25).
"""

from __future__ import annotations

import os
import random

SEED = int(os.environ.get("DURABLE_BEAT_CHAOS_SEED") or random.SystemRandom().randrange(10**9))
TRIALS = int(os.environ.get("DURABLE_BEAT_CHAOS_TRIALS") or 2)
SLOW_TRIALS = int(os.environ.get("DURABLE_BEAT_CHAOS_SLOW_TRIALS") or 25)


def header() -> str:
    return (
        f"chaos: seed {SEED} (DURABLE_BEAT_CHAOS_SEED={SEED} replays it), "
        f"{TRIALS} trials per scenario, {SLOW_TRIALS} with -m slow"
    )
