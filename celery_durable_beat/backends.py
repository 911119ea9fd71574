"""Concrete backends from settings: the one place that picks SQL, Redis or the store's lease row.

A composition root every process shares: beat (``wiring`` builds its round on these), the control
API (``DurableBeat`` opens its store, publisher, lease reader and worker registry here) and so
every surface on top of it. It may import any backend, lazily, inside the factory that needs it;
it never imports the round (``dispatch``, ``beat_loop``, ``leadership``, ``sync``, ``wiring``,
``scheduler``), so ``import celery_durable_beat.control`` does not load the beat loop
(import-linter: "The backend factories never load the round").

Nothing here connects: every client is built lazily (Celery makes throwaway scheduler instances,
and ``status`` must work when a backend is down). A missing driver or a URL no client can be
built from is a ``ConfigError`` naming the setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery_durable_beat.exceptions import ConfigError, SettingProblem
from celery_durable_beat.lease.base import HolderInfo, Lease
from celery_durable_beat.settings import Settings
from celery_durable_beat.store.base import LeaderInfo, SchemaStore, Store
from celery_durable_beat.urls import redact_url

if TYPE_CHECKING:
    from celery_durable_beat.lease.redis import RedisLease
    from celery_durable_beat.publish.celery_publisher import CeleryPublisher
    from celery_durable_beat.runs.sql import SqlRunStore


def make_store(settings: Settings) -> Store:
    from celery_durable_beat.store.sql import SqlStore

    return SqlStore(settings.url, stall_timeout_s=settings.lease_ttl, namespace=settings.namespace)


def make_lease(settings: Settings, store: Store) -> Lease:
    """The Redis lease when ``durable_beat_lease_url`` is set, else the store's lease row.

    Builds clients without connecting (Celery makes throwaway scheduler instances); a missing
    driver or a URL Redis cannot parse is a configuration error beat refuses to start with.
    """
    if settings.lease_url:
        return _redis_lease(settings, store)
    from celery_durable_beat.lease.sql import StoreLease, WriteTransactions

    if not isinstance(store, WriteTransactions):
        raise _lease_url_problem(
            f"the store {type(store).__name__} has no lease row; set it to a redis:// URL"
        )
    return StoreLease(store, settings.lease_ttl)


def _redis_lease(settings: Settings, store: Store) -> Lease:
    return _new_redis_lease(settings, epoch_floor=lambda: store.leader_info().epoch)


def _new_redis_lease(settings: Settings, **options: Any) -> RedisLease:
    """A RedisLease on the settings' URL and transport options, or the configuration error of a
    missing driver or a URL no client can be built from."""
    url = str(settings.lease_url)
    try:
        from celery_durable_beat.lease.redis import RedisLease, lease_key
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise _lease_url_problem(
            "a Redis lease needs the redis package: pip install 'celery_durable_beat[redis]'"
        ) from None
    try:
        return RedisLease(
            url,
            settings.lease_ttl,
            transport_options=settings.lease_transport_options,
            key=lease_key(settings.namespace),
            **options,
        )
    except ValueError as exc:
        raise _lease_url_problem(
            f"{redact_url(url)} is not a Redis URL ({exc}); use e.g. redis://host:6379/0"
        ) from None


class LeaseReader:
    """Who holds a lease kept outside the store, read without taking it (lease rule 5), as the
    store's ``LeaderInfo`` so ``status`` reads either kind of lease alike."""

    def __init__(self, lease: HolderInfo) -> None:
        self.lease = lease

    def read(self) -> LeaderInfo:
        seen = self.lease.holder_info()
        return LeaderInfo(holder=seen.holder, epoch=seen.epoch, expires_at_ms=seen.expires_at_ms)

    def close(self) -> None:
        self.lease.close()


def make_lease_reader(settings: Settings) -> LeaseReader | None:
    """The reader of the Redis lease when ``durable_beat_lease_url`` is set; None when the lease
    is the store's row (``Store.leader_info`` reads that). Connects on first read only."""
    if not settings.lease_url:
        return None
    return LeaseReader(_new_redis_lease(settings, holder="status"))


def _lease_url_problem(text: str) -> ConfigError:
    """A lease URL beat cannot use, reported as the setting it is (``setting durable_beat_lease_url:
    ...``), not as a schedule entry."""
    field = "durable_beat_lease_url"
    return ConfigError([SettingProblem("settings", field, f"{field}: {text}")])


BROKER_TIMEOUT_S = 5.0
"""How long one read or write on beat's broker connection may wait, unless
``broker_transport_options`` says otherwise (``bound_broker``)."""

BROKER_BOUNDS = {
    "redis": ("socket_timeout", "socket_connect_timeout"),
    "py-amqp": ("read_timeout", "write_timeout"),
}
"""The transport options that bound a wait, by kombu transport (its ``driver_name``)."""


def bound_broker(app: Any) -> dict[str, float]:
    """Give the app's broker connections a bound on every wait, where the user set none; the
    options added.

    kombu's Redis transport waits forever for a reply by default (``socket_timeout`` None), and
    py-amqp for a frame (no ``read_timeout``), so a publish to a broker that is frozen without
    closing the connection (a hung host, a stalled network path) would hang beat's round. With
    these, it fails as ``broker_unavailable`` within a bound (Celery's publish retries included;
    docs/high-availability.md). Connecting is bounded already, by Celery's
    ``broker_connection_timeout`` (4 s) on RabbitMQ and by ``socket_connect_timeout`` on Redis.

    Written into ``broker_transport_options`` of this process's app, as a new dict, before the
    first connection is made: the producer pool and the redelivery probe read it then. Keys the
    user set are never changed; nothing is added for another transport.
    """
    conf = app.conf
    try:  # builds the transport's class and connects nothing
        driver = str(getattr(app.connection_for_write().transport, "driver_name", ""))
    except Exception:  # a transport that cannot load: the first publish says why, as before
        return {}
    options = dict(conf.broker_transport_options or {})
    added = {
        name: BROKER_TIMEOUT_S for name in BROKER_BOUNDS.get(driver, ()) if name not in options
    }
    if "socket_timeout" in options:  # redis-py connects within it then: the user's choice
        added.pop("socket_connect_timeout", None)
    if added:
        conf.broker_transport_options = {**options, **added}
    return added


def make_publisher(app: Any, settings: Settings, scheduler: Any = None) -> CeleryPublisher:
    """The publisher of beat's rounds and of manual runs: the app's producers, and
    ``durable_beat_redact`` applied to every tick message's ``argsrepr`` / ``kwargsrepr``.
    ``scheduler``: the beat ``Scheduler`` of the rounds it serves, through whose ``apply_entry``
    ticks go when an integration wrapped stock beat's (SPEC §17); None for every other caller."""
    from celery_durable_beat.publish.celery_publisher import CeleryPublisher

    bound_broker(app)  # before the first connection: a frozen broker fails the round, in time
    return CeleryPublisher(app, redact_keys=settings.redact, scheduler=scheduler)


def make_worker_registry(store: SchemaStore) -> SqlRunStore | None:
    """Where ``status`` reads the live workers: the run tracking on a SQL store's URL, in the
    store's namespace (built without connecting); None for a store with no such table (the
    in-memory one)."""
    from celery_durable_beat.runs.factory import make_tracking
    from celery_durable_beat.store.sql import SqlStore

    if not isinstance(store, SqlStore):
        return None
    return make_tracking(store.url, store.namespace)
