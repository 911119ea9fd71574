"""The tick message in Celery's words: the keyword arguments of ``app.send_task`` for one tick.

``message.py`` owns the message's shape (pure); this module adds what needs Celery itself:
the ``argsrepr`` / ``kwargsrepr`` that Flower, task events and worker logs show, computed from
the args and kwargs with ``durable_beat_redact`` applied (``redact.redact``) and rendered by
Celery's own ``saferepr`` with the app's size limits, while the body keeps the real values for
the task.

It is shared, not a transport: every publish path (``publish/``) sends these keyword arguments,
and the beat-side queue check (``QueueRouter``, ``require_worker``) routes them the way
``send_task`` will, so the two can never disagree on a tick's queue. It lives outside
``publish/`` so that code can use it without importing a transport (import-linter: the worker
side never imports ``publish``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from celery.utils.saferepr import saferepr

from celery_durable_beat.message import TickMessage, tick_headers
from celery_durable_beat.redact import DEFAULT_KEYS, redact

RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
"""Short: a round must not hang on a dead broker; the next round retries anyway."""


@dataclass(frozen=True)
class ReprLimits:
    """How long Celery lets ``argsrepr`` / ``kwargsrepr`` grow, and how deep it looks."""

    args: int = 1024
    kwargs: int = 1024
    levels: int = 3

    @classmethod
    def of(cls, app: Any) -> ReprLimits:
        """The app's own limits, as ``app.amqp`` applies them to a task it sends itself."""
        amqp = app.amqp
        return cls(
            args=amqp.argsrepr_maxsize,
            kwargs=amqp.kwargsrepr_maxsize,
            levels=app.conf.get("task_repr_maxlevels", CELERY_LIMITS.levels),  # newer Celery
        )


CELERY_LIMITS = ReprLimits()
"""Celery's defaults, for callers without an app at hand."""


def shown_reprs(
    args: Sequence[Any],
    kwargs: Any,
    redact_keys: Sequence[str],
    limits: ReprLimits = CELERY_LIMITS,
) -> tuple[str, str]:
    """``(argsrepr, kwargsrepr)`` as Celery would write them, but of the redacted values: a
    mapping key containing any of ``redact_keys`` (case-insensitive, at any depth, in args too)
    shows ``***``. ``args`` and ``kwargs`` themselves are not changed."""
    return (
        saferepr(redact(list(args), redact_keys), limits.args, maxlevels=limits.levels),
        saferepr(redact(kwargs, redact_keys), limits.kwargs, maxlevels=limits.levels),
    )


def send_kwargs(
    message: TickMessage,
    redact_keys: Sequence[str] = DEFAULT_KEYS,
    limits: ReprLimits = CELERY_LIMITS,
) -> dict[str, Any]:
    """Keyword arguments for ``app.send_task``: the entry's options, then our id, headers and
    the redacted reprs (an ``argsrepr`` / ``kwargsrepr`` the entry sets itself is kept: its
    author chose what to show)."""
    options = dict(message.options)
    headers = {**dict(options.pop("headers", None) or {}), **tick_headers(message)}
    options.pop("task_id", None)
    argsrepr, kwargsrepr = shown_reprs(message.args, message.kwargs, redact_keys, limits)
    return {
        "argsrepr": argsrepr,
        "kwargsrepr": kwargsrepr,
        **options,
        # Copies all the way down: a tick may carry its definition's own values
        # (``message.build_message``), and ``send_task`` hands them to code of the user's —
        # ``before_task_publish`` receivers, router functions, an overridden ``apply_async``.
        "args": copy.deepcopy(list(message.args)),
        "kwargs": copy.deepcopy(dict(message.kwargs)),
        "task_id": message.task_id,
        "headers": headers,
        "retry": True,
        "retry_policy": RETRY_POLICY,
    }
