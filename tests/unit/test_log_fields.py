"""``log_extra`` and ``cause``: the one spelling of a log line's fields and of a swallowed error."""

from __future__ import annotations

import logging

import pytest

from celery_durable_beat.logs import CAUSE_LIMIT, cause, log_extra
from celery_durable_beat.model import Action

pytestmark = pytest.mark.unit


def test_log_extra_spells_the_action_as_its_value_beside_the_fields() -> None:
    assert log_extra(Action.QUARANTINED, schedule="a", n=1) == {
        "action": "quarantined",
        "schedule": "a",
        "n": 1,
    }


@pytest.mark.parametrize("field", ["name", "message", "args", "msg", "lineno", "created"])
def test_a_field_that_would_overwrite_the_record_is_refused_by_name(field: str) -> None:
    with pytest.raises(ValueError, match=f"log field\\(s\\) {field} clash"):
        log_extra(Action.SYNC, **{field: 1})


def test_the_fields_reach_the_record(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("celery_durable_beat.test")
    with caplog.at_level(logging.INFO, logger=log.name):
        log.info("x", extra=log_extra(Action.SYNC, count=3))
    (record,) = caplog.records
    assert (record.__dict__["action"], record.__dict__["count"]) == ("config_sync", 3)


class _Wrapper(Exception):
    """Like SQLAlchemy's DBAPIError: its text repeats the statement and its parameters."""

    def __init__(self, orig: BaseException) -> None:
        super().__init__("INSERT INTO t VALUES (%(kwargs)s)\n[parameters: {'kwargs': 'secret'}]")
        self.orig = orig


def test_cause_names_the_type_and_the_first_line() -> None:
    assert cause(ConnectionError("refused\nmore detail")) == "ConnectionError: refused"
    assert cause(TimeoutError()) == "TimeoutError"


def test_cause_takes_a_drivers_message_not_the_statement_and_its_parameters() -> None:
    shown = cause(_Wrapper(OSError("server closed the connection")))
    assert shown == "_Wrapper: server closed the connection"
    assert "secret" not in shown


def test_cause_hides_passwords_in_urls_and_is_bounded() -> None:
    shown = cause(OSError("cannot reach redis://:hunter2@h:6379/0 now"))
    assert "hunter2" not in shown and "redis://:***@h:6379/0" in shown
    assert len(cause(OSError("x" * 1000))) <= len("OSError: ") + CAUSE_LIMIT
