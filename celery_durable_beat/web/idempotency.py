"""What body each ``Idempotency-Key`` of a manual run came with, so a reuse with another body
is refused (422) instead of replaying a run that did not take the new kwargs (SPEC §9).

The store records a manual run's task id (derived from the key) but not its kwargs, so this
memo lives in the ``serve`` process: it catches the reuse within the process's life, up to
``MEMO_SIZE`` keys (the oldest forgotten first). A key reused with another body after a restart,
or on another ``serve`` process, still replays; closing that needs the store to keep a digest
of the kwargs with the manual run (``DurableBeat.trigger``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from celery_durable_beat.ids import name_key

MEMO_SIZE = 10_000
"""Most keys remembered; each costs about 150 bytes."""


def digest(kwargs: Mapping[str, Any] | None) -> str:
    """The body's identity: the same kwargs in any key order give the same digest."""
    text = json.dumps(kwargs or {}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class TriggerMemo:
    """``(schedule, key) -> digest`` of the first body seen, bounded, safe across threads."""

    def __init__(self, size: int = MEMO_SIZE) -> None:
        self._size = size
        self._seen: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def conflicts(self, name: str, key: str, kwargs: Mapping[str, Any] | None) -> bool:
        """Whether ``key`` ran earlier with another body."""
        with self._lock:
            first = self._seen.get((name_key(name), key))
        return first is not None and first != digest(kwargs)

    def remember(self, name: str, key: str, kwargs: Mapping[str, Any] | None) -> None:
        """Keep the body of a run that was sent (or replayed): a refused one binds no key."""
        slot = (name_key(name), key)
        with self._lock:
            self._seen.setdefault(slot, digest(kwargs))
            self._seen.move_to_end(slot)
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)
