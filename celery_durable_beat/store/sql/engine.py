"""Engines for the SQL store: URL rules, PostgreSQL and SQLite connection settings, the clock.

Kept apart from the queries because it is where the two backends differ most and where the
transaction discipline is set: PostgreSQL runs each store call in one READ COMMITTED
transaction; SQLite gets explicit ``BEGIN IMMEDIATE`` for writes (taking the write lock up front
so a read-then-write never fails with ``SQLITE_BUSY`` halfway) and ``BEGIN DEFERRED`` for reads.

The store's clock (SPEC §4: the leader decides what is due by it, not by its host's) is defined
here once for every SQL module: on PostgreSQL the server's, as ``PG_NOW`` (``clock_timestamp()``,
which moves within a transaction) or ``PG_TX_NOW`` (``now()``, the transaction's start: one
value for every statement of a call); on SQLite, which has no server, ``HOST_CLOCK``, the only
clock every process sharing the file can see.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import BigInteger, Table, create_engine, event, extract, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from celery_durable_beat.clock import SystemClock
from celery_durable_beat.exceptions import InvalidArgument, StoreUnavailable
from celery_durable_beat.urls import redact_url

if TYPE_CHECKING:
    import psycopg

T = TypeVar("T")

PG_CONNECT_TIMEOUT_S = 10
"""How long connecting to PostgreSQL may take: an outage must surface, not hang beat."""

PG_CALL_TIMEOUT_S = 10.0
"""How long one exchange with PostgreSQL (a statement and its results, a commit, the pool's
ping) may wait for the server, unless the URL sets ``durable_beat_call_timeout``: a server that
is frozen without closing the connection must fail the call (``StoreUnavailable``), not hang it
(``bounded.py``, ``watchdog.py``; SPEC §7)."""

CALL_TIMEOUT_PARAM = "durable_beat_call_timeout"
"""The store URL's query parameter for ``PG_CALL_TIMEOUT_S`` (seconds; ``0``: no bound). Ours,
not libpq's: it is taken out of the URL before libpq sees it."""

PG_TCP_DEFAULTS = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}
"""libpq's TCP settings unless the URL sets its own: a connection whose peer vanished (a
partition, a host gone without a FIN) fails within about 25 s of silence, or 30 s of unacknowledged
writes, instead of blocking beat until the network heals. A peer that keeps the TCP connection
alive but answers nothing (a hung proxy, a frozen server) is not detected this way: the call's
own deadline (``PG_CALL_TIMEOUT_S``) is what bounds that (docs/high-availability.md)."""

MULTI_HOST_HINT = (
    "; several PostgreSQL hosts are named in the query, not the netloc: "
    "postgresql://user@/db?host=h1:5432&host=h2:5432&target_session_attrs=read-write"
)
"""libpq's ``h1:5432,h2:5432`` netloc is not SQLAlchemy's; its query form is (SPEC §7)."""

IN_CHUNK = 500
"""Most bound values in one IN list (SQLite caps the variables of a statement)."""

BEGIN_OPTION = "durable_beat_begin"
"""Execution option choosing the SQLite BEGIN flavour; ``read`` or the default ``write``."""

PG_NOW = func.floor(extract("epoch", func.clock_timestamp()) * 1000).cast(BigInteger)
"""PostgreSQL's clock in epoch ms; ``clock_timestamp`` moves within a transaction, ``now()`` not."""

PG_TX_NOW = func.floor(extract("epoch", func.now()) * 1000).cast(BigInteger)
"""PostgreSQL's transaction timestamp in epoch ms: one value for every statement of the call."""

HOST_CLOCK = SystemClock()
"""The store's clock on SQLite: this host's."""

_SQLITE_BEGIN = {"read": "BEGIN DEFERRED", "write": "BEGIN IMMEDIATE"}
_PG_ALIASES = ("postgres", "postgresql")


def insert_into(table: Table, dialect_name: str) -> Any:
    """An INSERT of the store's dialect, so ``ON CONFLICT`` clauses can follow: the one place
    that switches between PostgreSQL's and SQLite's insert constructs."""
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    return dialect.insert(table)


def normalize_url(url: str) -> URL:
    """Parse a store URL; bare ``postgres://``/``postgresql://`` mean psycopg 3.

    Raises InvalidArgument for a malformed URL or a backend the store does not support, at
    construction time, because that is a configuration mistake no retry will fix.
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise InvalidArgument(  # the raw text may hold a password: never echo it
            "durable_beat_url is not a SQLAlchemy URL; write e.g. "
            "postgresql://user:password@host/db or sqlite:///path/to/file.sqlite3"
            + (MULTI_HOST_HINT if "," in url.partition("?")[0] else "")
        ) from None
    if parsed.drivername in _PG_ALIASES:
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend not in ("postgresql", "sqlite"):
        shown = redact_url(parsed.render_as_string(hide_password=False))
        raise InvalidArgument(
            f"durable_beat_url {shown} uses {backend!r}; the store supports "
            "postgresql://user@host/db and sqlite:///path/to/file.sqlite3"
        )
    call_timeout(parsed)  # a bad bound is refused when the URL is read, not at the first call
    return parsed


def build_engine(url: URL) -> Engine:
    """A pooled engine for ``url``; connects only when first used."""
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    return _pg_engine(url)


def call_timeout(url: URL) -> tuple[URL, float | None]:
    """The URL libpq is given (without ``durable_beat_call_timeout``) and the bound on each
    exchange with the server, in seconds: ``PG_CALL_TIMEOUT_S`` unless the URL sets one; None
    when it sets ``0`` (no bound) or when the driver is not psycopg 3 (only its waits can be
    watched, ``bounded.py``). InvalidArgument for a value that is not a number >= 0."""
    text = url.query.get(CALL_TIMEOUT_PARAM)
    stripped = url.difference_update_query([CALL_TIMEOUT_PARAM])
    if text is None:
        bound: float | None = PG_CALL_TIMEOUT_S
    else:
        try:
            bound = float(text if isinstance(text, str) else text[-1])
        except ValueError:
            bound = -1.0
        if not bound >= 0:  # NaN too
            raise InvalidArgument(
                f"durable_beat_url: {CALL_TIMEOUT_PARAM}={text!r} is not a number of seconds; "
                f"write e.g. ?{CALL_TIMEOUT_PARAM}=10 (or 0 for no bound)"
            )
        bound = bound or None
    if url.get_backend_name() != "postgresql" or url.get_driver_name() != "psycopg":
        bound = None
    return stripped, bound


def _pg_defaults(url: URL) -> dict[str, Any]:
    """The connection settings this module adds to a PostgreSQL URL that does not set them."""
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
    if "application_name" not in url.query:
        connect_args["application_name"] = "celery_durable_beat"
    connect_args.update({k: v for k, v in PG_TCP_DEFAULTS.items() if k not in url.query})
    return connect_args


def pg_connect_args(url: URL) -> dict[str, Any]:
    """What ``psycopg.connect`` takes to open the connection an engine of ``url`` opens (for
    the worker's direct statements, ``runs/pg_direct.py``)."""
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    dialect = PGDialect_psycopg()  # type: ignore[no-untyped-call]
    libpq_url, _ = call_timeout(url)
    _, params = dialect.create_connect_args(libpq_url)  # type: ignore[no-untyped-call]
    return {**params, **_pg_defaults(libpq_url)}


def pg_connector(url: URL) -> Callable[..., psycopg.Connection[Any]]:
    """``connect(**options)``: a psycopg connection of ``url`` (``pg_connect_args``, computed
    once, and ``options``), its waits bounded as an engine's are (``call_timeout``); for the
    worker's direct statements (``runs/pg_direct.py``)."""
    import psycopg

    args = pg_connect_args(url)
    _, bound = call_timeout(url)
    if bound is None:
        return lambda **options: psycopg.connect(**args, **options)
    from celery_durable_beat.store.sql import bounded

    return lambda **options: bounded.connect(bound, **args, **options)


def _pg_engine(url: URL) -> Engine:
    libpq_url, bound = call_timeout(url)
    connect_args = _pg_defaults(libpq_url)
    # pre_ping: after a database restart the pool would otherwise hand out dead connections.
    # hide_parameters: bound values (definitions, kwargs) never reach error text or logs.
    engine = create_engine(
        libpq_url, pool_pre_ping=True, hide_parameters=True, connect_args=connect_args
    )
    if bound is not None:
        from celery_durable_beat.store.sql import bounded

        def bounded_connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
            return bounded.connect(bound, *cargs, **cparams)

        # SQLAlchemy's documented hook for "make the DBAPI connection yourself": every other
        # part of the dialect (its connect args, on-connect setup) stays SQLAlchemy's.
        event.listen(engine, "do_connect", bounded_connect)
    return engine


def sqlite_write_problem(url: str) -> str | None:
    """Why the SQLite file of a store URL cannot be written, or None (PostgreSQL, memory, or a
    file that can be). Beat checks it at start: in an unwritable working directory the default
    ``sqlite:///celerybeat-durable.sqlite3`` made every round fail while beat kept running."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite" or _is_memory(parsed) or parsed.database is None:
        return None
    path = Path(parsed.database.removeprefix("file:")).expanduser().absolute()
    folder = path.parent
    if not folder.is_dir():
        return f"its folder {folder} does not exist"
    try:  # tried, not asked (``os.access`` says yes to root where the file system says no)
        if path.exists():
            path.open("r+b").close()
        else:
            tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        where = f"the file {path}" if path.exists() else f"its folder {folder}"
        return f"{where} is not writable ({exc.strerror or type(exc).__name__})"
    return None


def _is_memory(url: URL) -> bool:
    database = url.database or ""
    return database in ("", ":memory:") or url.query.get("mode") == "memory"


def _sqlite_engine(url: URL) -> Engine:
    memory = _is_memory(url)
    if not memory and "uri" not in url.query:
        folder = Path(url.database or "").expanduser().absolute().parent
        if not folder.is_dir():
            shown = redact_url(url.render_as_string(hide_password=False))
            raise StoreUnavailable(
                f"the durable beat store {shown} cannot be opened: the folder {folder} does not "
                "exist; create it or point durable_beat_url elsewhere"
            )
    options: dict[str, Any] = {
        "connect_args": {"check_same_thread": False},
        "hide_parameters": True,
    }
    if memory:
        # One shared connection, or every pooled connection would see its own empty database.
        options["poolclass"] = StaticPool
    engine = create_engine(url, **options)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # The sqlite3 module's own transaction handling begins lazily and only before DML; turning it
    # off lets the "begin" listener emit the BEGIN flavour each call needs.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # A writer waits up to 10 s for the write lock before the call fails as unavailable.
        cursor.execute("PRAGMA busy_timeout = 10000")
        # WAL lets readers (CLI, console) work while beat writes.
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _sqlite_on_begin(connection: Connection) -> None:
    flavour = connection.get_execution_options().get(BEGIN_OPTION, "write")
    connection.exec_driver_sql(_SQLITE_BEGIN[flavour])


def limit_idle(conn: Connection, idle_ms: int) -> None:
    """PostgreSQL: end this transaction's session if it sits idle longer than ``idle_ms``.

    For the round's audit-and-advance transaction, whose row locks would otherwise outlive a
    leader frozen inside it; the transaction is short (nothing is published while it is open),
    so a TTL-long limit never ends a healthy round.
    """
    conn.execute(
        select(func.set_config("idle_in_transaction_session_timeout", str(max(100, idle_ms)), True))
    )


_UNAVAILABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)


class LazyEngine:
    """A SQLAlchemy engine built on first use and disposed by ``close()``, shared plumbing of
    the stores.

    Building one never connects: Celery creates throwaway scheduler instances, and an outage at
    start must surface as ``StoreUnavailable`` from the first call, where beat backs off.
    """

    def __init__(self, url: str) -> None:
        self._url = normalize_url(url)
        self.url = self._url.render_as_string(hide_password=False)
        self.shown_url = redact_url(self.url)
        self._engine: Engine | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shown_url!r})"

    def _get_engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                self._engine = build_engine(self._url)
            return self._engine

    @property
    def _postgres(self) -> bool:
        return self._url.get_backend_name() == "postgresql"

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        """The error beat backs off on: the URL without its password and the first line only."""
        cause = getattr(exc, "orig", None) or exc
        first_line = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        return StoreUnavailable(f"the durable beat store at {self.shown_url} failed: {first_line}")

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except _UNAVAILABLE as exc:
            raise self._unavailable(exc) from exc
        except sa_exc.DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            # The server ended the session (e.g. psycopg reports an idle-in-transaction timeout
            # as InternalError): the connection is gone, as in an outage.
            raise self._unavailable(exc) from exc

    @contextmanager
    def _tx(self, *, write: bool = True) -> Iterator[Connection]:
        """One transaction, committed when the block ends without an exception."""
        with self._guard(), self._get_engine().connect() as conn:
            if not write:
                conn.execution_options(**{BEGIN_OPTION: "read"})
            with conn.begin():
                yield conn

    def _read(self, query: Callable[[Connection], T]) -> T:
        with self._tx(write=False) as conn:
            return query(conn)

    def _write(self, change: Callable[[Connection], T]) -> T:
        with self._tx() as conn:
            return change(conn)

    def write_transaction(self, change: Callable[[Connection], T]) -> T:
        """Run ``change`` in one write transaction (for statements kept beside their backend,
        such as the store lease's); outages raise ``StoreUnavailable``, as every store call."""
        return self._write(change)

    def close(self) -> None:
        """Dispose of the pool; idempotent, and the next call builds a new engine."""
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()
