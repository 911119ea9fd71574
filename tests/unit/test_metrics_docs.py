"""docs/metrics.md, the Grafana dashboard and the alert rules cannot drift from the code.

The names come from what the code registers (a ``BeatMetrics`` and a ``StatusCollector`` on
registries of their own), not from a list copied here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from celery_durable_beat.clock import SystemClock
from celery_durable_beat.metrics import METRIC_NAMES, BeatMetrics, StatusCollector
from celery_durable_beat.model import Action
from celery_durable_beat.testing import MemoryStore

pytestmark = pytest.mark.unit

DOCS = Path(__file__).parents[2] / "docs"
PROMQL_WORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset", "group_left",
     "group_right", "inf", "nan"}
)  # fmt: skip


def registered() -> dict[str, str]:
    """Every family the code registers, by exposed name (a counter's with ``_total``): type."""
    beat = CollectorRegistry()
    BeatMetrics(beat, store=MemoryStore(), clock=SystemClock())
    serve = StatusCollector(lambda: pytest.fail("describing must not read a status"))
    families = [*beat.collect(), *serve.describe()]
    return {f.name + ("_total" if f.type == "counter" else ""): f.type for f in families}


def sample_names() -> set[str]:
    """The series names a query may use: a histogram's ``_bucket``/``_sum``/``_count``."""
    names: set[str] = set()
    for name, kind in registered().items():
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


def metric_references(expr: str) -> list[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions,
    keywords, label names (in ``{...}`` and ``by (...)``) or inside strings and ranges."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    words = re.finditer(r"(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*", text)
    return [m.group() for m in words if m.group() not in PROMQL_WORDS and not _is_call(text, m)]


def _is_call(text: str, match: re.Match[str]) -> bool:
    return text[match.end() :].lstrip().startswith("(")


def alert_rules() -> list[dict[str, object]]:
    doc = yaml.safe_load((DOCS / "prometheus-alerts.yaml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_exprs() -> Iterator[str]:
    board = json.loads((DOCS / "grafana-dashboard.json").read_text())
    for panel in board["panels"]:
        for target in panel["targets"]:
            yield target["expr"]


def test_the_code_registers_exactly_the_specs_names() -> None:
    assert set(registered()) == set(METRIC_NAMES)
    assert len(METRIC_NAMES) == 9


def test_metrics_md_lists_every_registered_metric_with_its_type() -> None:
    doc = (DOCS / "metrics.md").read_text()
    for name, kind in registered().items():
        assert re.search(rf"^\| `{name}` \| {kind} \|", doc, re.M), f"{name} ({kind}) missing"


def test_metrics_md_lists_every_log_action() -> None:
    doc = (DOCS / "metrics.md").read_text()
    missing = [a.value for a in Action if f"| `{a.value}` |" not in doc]
    assert not missing


def test_the_reference_parser_finds_metrics_and_skips_the_rest() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(x_bucket{state="a b"}[5m]))) > 3 * 1 '
        "or absent(y) and time() - max(z) > 0"
    )
    assert metric_references(expr) == ["x_bucket", "y", "z"]


def test_every_alert_expression_reads_only_registered_metrics() -> None:
    known = sample_names()
    for rule in alert_rules():
        refs = metric_references(str(rule["expr"]))
        assert refs and set(refs) <= known, (rule["alert"], refs)


def test_the_alerts_cover_what_operators_need() -> None:
    exprs = {str(rule["alert"]): str(rule["expr"]) for rule in alert_rules()}
    assert "durable_beat_last_round_timestamp_seconds" in exprs["DurableBeatNoRound"]
    assert "sum(durable_beat_leader) == 0" in exprs["DurableBeatNoLeader"]
    assert 'durable_beat_schedules{state="quarantined"}' in exprs["DurableBeatQuarantined"]
    lag = exprs["DurableBeatDispatchLagHigh"]
    assert "histogram_quantile(0.99" in lag and "durable_beat_dispatch_lag_seconds_bucket" in lag


def test_every_dashboard_query_reads_only_registered_metrics() -> None:
    known = sample_names()
    used: set[str] = set()
    for expr in dashboard_exprs():
        refs = metric_references(expr)
        assert refs and set(refs) <= known, (expr, refs)
        used |= set(refs)
    names = {re.sub(r"_(bucket|sum|count)$", "", ref) for ref in used}
    assert names == set(METRIC_NAMES)  # the dashboard shows every metric
