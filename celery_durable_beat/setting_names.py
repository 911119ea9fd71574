"""Settings named as the user wrote them: the key Celery's own lookup matched (SPEC §16).

Celery reads a setting under the app's namespace: after
``app.config_from_object("django.conf:settings", namespace="CELERY")``,
``app.conf.get("durable_beat_url")`` tries ``CELERY_DURABLE_BEAT_URL`` and then
``durable_beat_url`` (with the old-style spellings Celery still maps), map by map
(``ConfigurationView._to_keys`` and ``__getitem__``). Values are read that way everywhere; this
module answers the other half: which of those keys held the value, so that a message about
``CELERY_DURABLE_BEAT_LEASE_TTL = -5`` names ``CELERY_DURABLE_BEAT_LEASE_TTL``, the line the
user has to find and fix, not an internal ``durable_beat_lease_ttl`` that appears nowhere in
their project. A setting left unset is named as it would be written in that conf (the
namespaced form under a namespace), since that is the line the fix adds.

Pure: no Celery import, only the lookup's own attributes read off the conf.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class Matched:
    """Where Celery's lookup found a key: the spelling it matched and the map that holds it."""

    key: str
    holder: Any
    """The map (``DictAttribute`` over ``django.conf.settings`` for a Django project,
    ``app.conf``'s own changes, a config module, Celery's defaults)."""


def _candidates(conf: Any, key: str) -> tuple[str, ...]:
    to_keys = getattr(conf, "_to_keys", None)
    return tuple(to_keys(key)) if callable(to_keys) else (key,)


def matched(conf: Any, key: str, *, defaults: bool = True) -> Matched | None:
    """The key ``conf.get(key)`` reads, as the user wrote it, or None when no map holds it.

    The same walk as Celery's ``ConfigurationView.__getitem__`` (every map in order, every
    candidate spelling within it), so the answer is the key whose value Celery returns; a plain
    mapping (``Settings.from_conf({...})``) holds its keys as they are. ``defaults=False``
    leaves out Celery's own defaults, the last map of an ``app.conf`` (as Celery's
    ``value_set_for`` does): what the user set, not what Celery would fall back to.
    """
    if getattr(conf, "maps", None) is None:
        return Matched(key, conf) if key in conf else None
    if hasattr(conf, "finalize"):
        conf.finalize()  # a pending app.conf swaps its maps in on first read
    maps = list(conf.maps)
    if not defaults and hasattr(conf, "without_defaults"):
        maps = maps[:-1]
    normal = getattr(conf, "_key", lambda k: k)
    for holder in maps:
        for candidate in _candidates(conf, key):
            try:
                holder[normal(candidate)]
            except KeyError:
                continue
            return Matched(candidate, holder)
    return None


def written_name(conf: Any, key: str) -> str:
    """How ``key`` is named to the user: as written when set, else as it would be written in
    this conf (``CELERY_DURABLE_BEAT_DEDUP_TTL``, ``CELERY_TIMEZONE`` under the ``CELERY``
    namespace)."""
    found = matched(conf, key, defaults=False)
    return found.key if found is not None else _candidates(conf, key)[0]


@dataclass(frozen=True)
class SettingNames:
    """Each setting's name in messages: field (``lease_ttl``) → the name the user knows.

    Built by ``Settings.from_conf`` from the conf it read (and the environment variables that
    overrode it); a ``Settings`` made with keywords names every setting ``durable_beat_<field>``,
    the spelling of the docs. Never holds a value, so it may be logged and compared freely.
    """

    prefix: str = "durable_beat_"
    written: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def of(self, name: str) -> str:
        """The name of the setting whose field is ``name`` (``lease_ttl``)."""
        return self.written.get(name, self.prefix + name)

    @classmethod
    def of_conf(
        cls,
        conf: Any,
        names: Iterable[str],
        prefix: str = "durable_beat_",
        overrides: Mapping[str, str] | None = None,
    ) -> SettingNames:
        """Every field in ``names`` named as ``conf`` holds it; ``overrides`` (field → the
        environment variable whose value won) take precedence."""
        written = {name: written_name(conf, prefix + name) for name in names}
        written.update(overrides or {})
        return cls(prefix, MappingProxyType(written))


PLAIN = SettingNames()
"""The docs' spelling, ``durable_beat_<field>``: the names of keyword-built settings."""
