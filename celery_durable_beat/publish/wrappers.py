"""Whether a function of Celery's is still Celery's own, or something replaced it with a wrapper.

Monitoring integrations hook into stock beat by replacing methods in place, on the class:
Sentry's ``CeleryIntegration`` replaces ``celery.beat.Scheduler.apply_entry`` at
``sentry_sdk.init`` (and ``Celery.send_task``, ``Task.apply_async`` and kombu's
``Producer.publish``); Datadog's tracer replaces ``Scheduler.apply_entry``, ``Scheduler.tick``
and ``Task.apply_async`` with ``wrapt`` proxies. A tick that skipped such a wrapper would be
invisible to the tool, so the publisher asks here, once per round, which path still calls every
wrapper (SPEC §17): ``beat_wrappers`` decides whether ticks go through ``apply_entry``
(``through_beat.py``), ``celery_own`` whether the templated Redis path may skip ``send_task``.

A function is Celery's own when it is a plain function, wraps nothing (no ``__wrapped__``) and
its code was compiled from the module that defines it, under its own qualified name. A
``functools.wraps`` wrapper copies the name but not the code; a ``wrapt`` proxy forwards
``__code__`` and ``__module__`` to what it wraps, but it is not a plain function. Nothing is
remembered from import time: an integration initialised after this package was imported is seen
just the same.
"""

from __future__ import annotations

import sys
from types import FunctionType
from typing import Any

BEAT_METHODS = ("apply_entry", "apply_async")
"""The methods of ``celery.beat.Scheduler`` a beat integration wraps to see each due entry."""


def celery_own(owner: type, name: str) -> bool:
    """Whether ``owner.name`` (the class's own attribute, unbound) is the function the module
    defining ``owner`` defines, not a wrapper put in its place."""
    function = vars(owner).get(name)
    if type(function) is not FunctionType or hasattr(function, "__wrapped__"):
        return False
    code = function.__code__
    module = sys.modules.get(owner.__module__)
    qualname = getattr(code, "co_qualname", None)  # Python 3.11+; the name alone before
    expected = f"{owner.__qualname__}.{name}" if qualname is not None else name
    return (
        module is not None
        and code.co_filename == getattr(module, "__file__", None)
        and (qualname if qualname is not None else code.co_name) == expected
    )


def beat_wrappers() -> dict[str, str]:
    """Each method of ``celery.beat.Scheduler`` (``BEAT_METHODS``) that something replaced,
    with the name of the function that replaced it; empty when stock beat's are in place."""
    from celery import beat

    return {
        name: who(vars(beat.Scheduler).get(name))
        for name in BEAT_METHODS
        if not celery_own(beat.Scheduler, name)
    }


def who(wrapper: Any) -> str:
    """``module.qualname`` of a wrapper, for a log line: of the wrapper function itself for a
    ``wrapt`` proxy (which keeps it as ``_self_wrapper`` and forwards its own names to what it
    wraps)."""
    inner = getattr(wrapper, "_self_wrapper", wrapper)
    module = getattr(inner, "__module__", None) or type(inner).__module__
    name = getattr(inner, "__qualname__", None) or type(inner).__qualname__
    return f"{module}.{name}"
