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

`celery -A proj durable-beat serve [--host 127.0.0.1] [--port 8088]
[--forwarded-allow-ips ADDRESSES]` (the `web` extra) serves this JSON API under `/api/v1`, its
OpenAPI 3 document at `/api/v1/openapi.json`, `/healthz`, `/metrics` and the
[web console](console.md) at `/`. It goes through `DurableBeat` like the CLI: each answer is
exactly what the matching CLI verb prints with `--json` (SPEC §8, §9).

This page is generated from the OpenAPI document by `scripts/api_doc.py`; a test fails when
the two differ.

## Authentication and roles

Send `Authorization: Bearer <token>`. Tokens and their roles come from
`durable_beat_api_tokens` (`{"<token>": "viewer"|"operator"|"admin"}`) or the environment
variable `DURABLE_BEAT_API_TOKENS=admin:<token>,viewer:<token>`, which wins. `serve` refuses to
start (exit 2, naming the setting) without a token, or with one shorter than 16 characters:
make them with `python -c 'import secrets; print(secrets.token_urlsafe(24))'`. Tokens are
compared in constant time, read only from the header (a `?token=` in the URL is ignored) and
never logged: the access log drops query strings.

Roles are cumulative: `viewer` reads; `operator` also pauses, resumes and runs now; `admin` also
creates, changes, archives and deletes. No or an unknown token is `401` with
`WWW-Authenticate: Bearer`; a role too weak is `403`. The caller is judged before the request:
a request without a valid token is `401` whatever its body (never `400` or `422`).

## Errors

Every error, the server's own included (unknown path, wrong method, unreadable body), is
`{"error": {"code": ..., "message": ...}}`; `invalid` adds
`"problems": [{"field": ..., "problem": ...}]`, one per problem. Every answer, errors
included, carries the security headers (`Content-Security-Policy`, `X-Content-Type-Options:
nosniff`, `Referrer-Policy: same-origin`, `X-Frame-Options: DENY`) and `Cache-Control:
no-store`. No input makes `serve` answer `500` (`internal` is kept for a bug: its traceback
goes to the server's log, never to the client).

| status | code | when |
|---|---|---|
| 400 | `invalid` | the body is not JSON (or not UTF-8) |
| 401 | `unauthorized` | no token, or one not configured |
| 403 | `forbidden` | the token's role may not do this |
| 404 | `not_found` | no schedule by that name, or no such path |
| 405 | `method_not_allowed` | the path does not take the method; `Allow` lists all it takes |
| 409 | `conflict` | config owns the name (PUT, DELETE), or it is archived (pause, resume) |
| 413 | `too_large` | a request body over 1 MiB |
| 422 | `invalid` | a bad body or query (each problem, `limit` not 1..100), a reused key |
| 503 | `store_unavailable` | the store does not answer (`serve` stays up meanwhile) |
| 503 | `broker_unavailable` | the broker refused a manual run |
| 503 | `lease_unavailable` | `status` could not read the Redis lease |

Names may hold any character, `/` and newlines included: URL-encode them
(`reports%2Fdaily%20%C3%BC`). A path ending in `/pause`, `/resume`, `/trigger`, `/archive` or
`/enqueue-events` is always that action (validation refuses names ending so), so
`PUT /api/v1/schedules/nightly/pause` is `405` with `Allow: POST`, never a schedule named
`nightly/pause`.

A manual run's `Idempotency-Key` replays the first run (`200 {"created": false}`) only with the
same body; with other `kwargs` it is `422 invalid` (`problems` names `kwargs`). The run's history
record keeps a digest of its kwargs (salted with the key, never shown), so the refusal holds
across `serve` processes and restarts, and for the CLI's `trigger` too.

`GET /healthz` needs no token: `200 {"status": "ok"}` when the store answers, `503` (with
`"error": {"code": "store_unavailable"}`) otherwise. `serve` starts while the store is down,
and every request tries it again, so no restart is needed when it comes back.
`GET /metrics` is Prometheus text (docs/metrics.md), also without a token: it carries no names.

## Behind a reverse proxy

`serve` believes no `X-Forwarded-*` header unless told which proxies send them:
`serve --forwarded-allow-ips 10.0.0.5` (comma-separated addresses, or `*` when only the proxy
can reach `serve`) turns on uvicorn's proxy headers for those addresses. The console's cookie is
then `Secure` when the proxy says the browser came over HTTPS (`X-Forwarded-Proto: https`), and
sign-in throttling counts the browser's address (`X-Forwarded-For`), not the proxy's.

## Endpoints
"""


def openapi() -> dict[str, Any]:
    app = Celery("doc", broker="memory://", set_as_current=False)
    with DurableBeat(app) as beat:
        return create_app(beat, tokens={"doc-token-0123456789": "viewer"}).openapi()  # type: ignore[arg-type]


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
