"""Write docs/api.md from the HTTP API's own OpenAPI document (``--check``: fail if it differs).

.venv/bin/python scripts/api_doc.py          # regenerate docs/api.md
.venv/bin/python scripts/api_doc.py --check  # what tests/unit/test_api_doc.py runs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from celery import Celery

from celery_durable_beat import DurableBeat
from celery_durable_beat.web import create_app

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"

INTRO = """\
# HTTP API

`celery -A proj durable-beat serve [--host 127.0.0.1] [--port 8088]` (the `web` extra) serves
this JSON API under `/api/v1`, its OpenAPI 3 document at `/api/v1/openapi.json`, `/healthz`,
`/metrics` and the [web console](console.md) at `/`. It goes through `DurableBeat` like the CLI:
each answer is exactly what the matching CLI verb prints with `--json` (SPEC §8, §9).

This page is generated from the OpenAPI document by `scripts/api_doc.py`; a test fails when
the two differ.

## Authentication and roles

Send `Authorization: Bearer <token>`. Tokens and their roles come from
`durable_beat_api_tokens` (`{"<token>": "viewer"|"operator"|"admin"}`) or the environment
variable `DURABLE_BEAT_API_TOKENS=admin:<token>,viewer:<token>`, which wins. `serve` refuses to
start without a token. Tokens are compared in constant time, read only from the header (a
`?token=` in the URL is ignored) and never logged: the access log drops query strings.

Roles are cumulative: `viewer` reads; `operator` also pauses, resumes and runs now; `admin` also
creates, changes, archives and deletes. No or an unknown token is `401` with
`WWW-Authenticate: Bearer`; a role too weak is `403`.

## Errors

Every error is `{"error": {"code": ..., "message": ...}}`; `invalid` adds
`"problems": [{"field": ..., "problem": ...}]`, one per problem.

| status | code | when |
|---|---|---|
| 401 | `unauthorized` | no token, or one not configured |
| 403 | `forbidden` | the token's role may not do this |
| 404 | `not_found` | no schedule by that name |
| 409 | `conflict` | config owns the name (PUT, DELETE), or it is archived (pause, resume) |
| 413 | `too_large` | a request body over 1 MiB |
| 422 | `invalid` | a bad body or query (each problem of a definition, `limit` not 1..100) |
| 503 | `unavailable` | the store does not answer, or the broker refused a manual run |

Names may hold any character: URL-encode them (`reports%2Fdaily%20%C3%BC`).

`GET /healthz` needs no token: `200 {"status": "ok"}` when the store answers, `503` otherwise.
`GET /metrics` is Prometheus text (docs/metrics.md), also without a token: it carries no names.

## Endpoints
"""


def openapi() -> dict[str, Any]:
    app = Celery("doc", broker="memory://", set_as_current=False)
    with DurableBeat(app) as beat:
        return create_app(beat, tokens={"doc": "viewer"}).openapi()  # type: ignore[arg-type]


def render(doc: dict[str, Any]) -> str:
    lines = [INTRO, "| method | path | role | answers | what |", "|---|---|---|---|---|"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            codes = ", ".join(sorted(op["responses"]))
            lines.append(
                f"| `{method.upper()}` | `{path}` | {op.get('x-role', '')} | {codes} | "
                f"{op.get('description', op.get('summary', '')).strip().splitlines()[0]} |"
            )
    lines += ["", "### Parameters", ""]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            params = [
                f"`{p['name']}` ({p['in']}{', required' if p.get('required') else ''})"
                for p in op.get("parameters", [])
            ]
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            if body:
                params.append("JSON body")
            lines.append(f"- `{method.upper()} {path}`: {', '.join(params) or 'none'}")
    lines += ["", "## Bodies", ""]
    for name, schema in doc["components"]["schemas"].items():
        if name in ("HTTPValidationError", "ValidationError"):
            continue
        lines.append(f"### {name}")
        lines.append("")
        if schema.get("description"):
            lines += [schema["description"], ""]
        for field, spec in schema.get("properties", {}).items():
            lines.append(f"- `{field}`: {_type(spec)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _type(spec: dict[str, Any] | bool) -> str:  # noqa: PLR0911 (one return per JSON Schema shape)
    if isinstance(spec, bool):
        return "any"
    if "$ref" in spec:
        return spec["$ref"].rsplit("/", 1)[1]
    if "anyOf" in spec:
        return " or ".join(_type(option) for option in spec["anyOf"])
    if "enum" in spec:
        return " | ".join(json.dumps(v) for v in spec["enum"])
    if spec.get("type") == "array":
        return f"array of {_type(spec.get('items', {}))}"
    if spec.get("type") == "object" and "additionalProperties" in spec:
        return f"object of {_type(spec['additionalProperties'])}"
    return str(spec.get("type", "any"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render(openapi())
    if args.check:
        if not DOC.exists() or DOC.read_text() != text:
            print("docs/api.md is out of date: run scripts/api_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
