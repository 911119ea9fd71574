"""Logs as data (SPEC §10): every log call in the package carries a stable ``action``.

Alerts, dashboards and tests select log lines on ``record.action``, never on message text, which
may be reworded at any time. The check reads the package's source with :mod:`ast` rather than
running it, so a new log call without an action fails here, naming its file and line, even on a
path no other test reaches (an outage branch, a debug detail). Nothing is excluded: a module
that logs must say what each line is about, in the one vocabulary of
:class:`celery_durable_beat.model.Action`, spelt through the one helper
(:func:`celery_durable_beat.logs.log_extra`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import celery_durable_beat
from celery_durable_beat.model import Action

pytestmark = pytest.mark.unit

PACKAGE_ROOT = Path(celery_durable_beat.__file__).resolve().parent
LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}
)
LOGGER_NAMES = frozenset({"log", "logger"})
LOGGER_FACTORIES = frozenset({"getLogger", "get_task_logger", "get_logger"})
ACTIONS_DOC = PACKAGE_ROOT.parent / "docs" / "metrics.md"


def _last_name(node: ast.expr) -> str | None:
    """``log`` for ``log``, ``self.log`` and ``module.log`` alike."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_log_call(call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr in LOG_METHODS
        and _last_name(func.value) in LOGGER_NAMES
    )


def _action_problem(value: ast.expr) -> str | None:
    """Why ``value`` is not ``Action.<MEMBER>`` for a real member, or None if it is.

    One indirection is allowed, by name: ``action`` / ``self.action``, where a helper that logs
    for several callers (a circuit, a quiet heartbeat step) is handed its ``Action``.
    """
    if _last_name(value) == "action":
        return None
    if not (
        isinstance(value, ast.Attribute)
        and isinstance(value.value, ast.Name)
        and value.value.id == "Action"
    ):
        return "the action is not written as Action.<MEMBER>"
    if value.attr not in Action.__members__:
        return f"Action has no member {value.attr}"
    return None


def _problem(call: ast.Call) -> str | None:
    """What is wrong with one log call's ``extra``, or None when it is ``log_extra(<action>, ...)``
    (``celery_durable_beat.logs``): the one spelling, so no line hand-writes its fields."""
    extra = next((kw.value for kw in call.keywords if kw.arg == "extra"), None)
    if extra is None:
        return "no extra= with an action"
    if not (isinstance(extra, ast.Call) and _last_name(extra.func) == "log_extra"):
        return "extra= is not log_extra(Action.<MEMBER>, ...)"
    if not extra.args:
        return "log_extra() without its action"
    return _action_problem(extra.args[0])


def _violations(source: str, where: str) -> list[str]:
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and _is_log_call(n)]
    found = sorted((call.lineno, problem) for call in calls if (problem := _problem(call)))
    return [f"{where}:{line}: {problem}" for line, problem in found]


def _badly_named_loggers(source: str, where: str) -> list[str]:
    """Loggers bound to another name would slip past the check above; name them ``log``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        if _last_name(node.value.func) not in LOGGER_FACTORIES:
            continue
        names = [_last_name(target) for target in node.targets]
        if any(name not in LOGGER_NAMES for name in names):
            found.append(f"{where}:{node.lineno}: logger bound to {names}; call it log")
    return found


def _modules() -> list[tuple[str, str]]:
    paths = sorted(PACKAGE_ROOT.rglob("*.py"))
    assert paths, f"no modules found under {PACKAGE_ROOT}"
    return [
        (str(path.relative_to(PACKAGE_ROOT.parent)), path.read_text(encoding="utf-8"))
        for path in paths
    ]


def test_every_log_call_carries_an_action() -> None:
    found = [v for where, source in _modules() for v in _violations(source, where)]
    assert not found, "log calls without a stable action:\n" + "\n".join(found)


def test_every_logger_is_named_so_the_check_sees_it() -> None:
    found = [v for where, source in _modules() for v in _badly_named_loggers(source, where)]
    assert not found, "\n".join(found)


def test_every_action_is_documented() -> None:
    """SPEC §10: ``docs/`` lists the actions, so operators can alert on them."""
    doc = ACTIONS_DOC.read_text(encoding="utf-8")
    missing = [action.value for action in Action if f"| `{action.value}` |" not in doc]
    assert not missing, f"{ACTIONS_DOC.name} does not list {missing}"


def test_every_enum_member_has_a_docstring() -> None:
    """A member's one-line docstring is what tells an operator what the word means."""
    found = []
    model = PACKAGE_ROOT / "model.py"
    for cls in ast.parse(model.read_text(encoding="utf-8")).body:
        if not isinstance(cls, ast.ClassDef) or not _is_enum(cls):
            continue
        for index, node in enumerate(cls.body):
            if isinstance(node, ast.Assign) and not _string_follows(cls.body, index):
                found.append(f"{cls.name}.{_last_name(node.targets[0])}")
    assert not found, f"enum members without a docstring: {found}"


def _is_enum(cls: ast.ClassDef) -> bool:
    return any(_last_name(base) == "Enum" for base in cls.bases)


def _string_follows(body: list[ast.stmt], index: int) -> bool:
    after = body[index + 1] if index + 1 < len(body) else None
    return (
        isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    )


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ('log.info("x", extra=log_extra(Action.SYNC))', None),
        ('self.log.error("x", extra=log_extra(Action.QUARANTINED, n=1))', None),
        ('log.warning("x", extra=log_extra(self.action, n=1))', None),
        ('print("x")', None),
        ('logging.getLogger("y")', None),
        ('log.debug("x")', "no extra= with an action"),
        ('logger.exception("x", exc_info=True)', "no extra= with an action"),
        ('log.warning("x", extra=fields)', "extra= is not log_extra"),
        ('log.info("x", extra={"action": Action.SYNC.value})', "extra= is not log_extra"),
        ('log.info("x", extra=log_extra())', "log_extra() without its action"),
        ('log.info("x", extra=log_extra("round"))', "not written as Action.<MEMBER>"),
        ('log.info("x", extra=log_extra(Action.SYNC.value))', "not written as Action.<MEMBER>"),
        ('log.info("x", extra=log_extra(Action.NOPE))', "Action has no member NOPE"),
    ],
)
def test_the_check_tells_good_calls_from_bad(source: str, problem: str | None) -> None:
    found = _violations(source, "m.py")
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1
        assert found[0].startswith("m.py:1: ")
        assert problem in found[0]


def test_a_logger_under_another_name_is_reported() -> None:
    assert _badly_named_loggers('log = logging.getLogger("a")', "m.py") == []
    found = _badly_named_loggers('_audit = logging.getLogger("a")', "m.py")
    assert found == ["m.py:1: logger bound to ['_audit']; call it log"]
