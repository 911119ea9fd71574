"""The web console at ``/`` (SPEC §9): server-rendered pages over ``DurableBeat``.

Signed in with an API token kept in an HttpOnly, SameSite=Strict cookie; every form carries a
CSRF token bound to that token (``auth.csrf_token``); Jinja2 escapes every value. Buttons appear
only for roles that may use them, and the POST handlers check the role again (a hidden button
is not a permission). The schedules table is filtered and paged on the server, so a store of
10,000 schedules renders ``PAGE_SIZE`` rows.
"""

from __future__ import annotations

import hmac
import secrets
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from celery_durable_beat.control import DurableBeat
from celery_durable_beat.control.views import ScheduleView
from celery_durable_beat.exceptions import DurableBeatError, ScheduleNotFound
from celery_durable_beat.schedules.describe import describe
from celery_durable_beat.schedules.render import tick_isoformat
from celery_durable_beat.settings import Role
from celery_durable_beat.web.auth import COOKIE, Tokens, allows, csrf_ok, csrf_token

LOGIN_COOKIE = "durable_beat_login"
"""The sign-in form's CSRF value, for the form's own path only."""
PAGE_SIZE = 100
"""Schedules per page of the table."""
HISTORY_PAGE = 25
STATES = ("active", "paused", "quarantined", "archived")
ACTIONS = {"pause": Role.OPERATOR, "resume": Role.OPERATOR, "trigger": Role.OPERATOR}
DONE = {"pause": "Paused.", "resume": "Resumed: it ticks again from now.", "trigger": "Sent."}

templates = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
templates.env.filters["quote"] = lambda name: quote(str(name), safe="")


def _when(value: str | int | None, tz: str) -> str:
    """An instant for people: ``2026-12-01 03:30 EST`` in the schedule's zone (seconds only
    when there are some); ISO 8601 stays in the API and the page's ``title`` attributes."""
    if value is None:
        return ""
    if isinstance(value, int):
        value = tick_isoformat(value, tz)
    moment = datetime.fromisoformat(value).astimezone(ZoneInfo(tz))
    shape = "%Y-%m-%d %H:%M:%S %Z" if moment.second else "%Y-%m-%d %H:%M %Z"
    return moment.strftime(shape)


templates.env.filters["when"] = _when
router = APIRouter(include_in_schema=False)


def _session(request: Request) -> tuple[str, Role] | None:
    token = request.cookies.get(COOKIE)
    tokens: Tokens = request.app.state.tokens
    role = tokens.role_of(token)
    return None if token is None or role is None else (token, role)


def _page(
    request: Request,
    template: str,
    session: tuple[str, Role] | None,
    status_code: int = 200,
    **context: Any,
) -> Response:
    token, role = session if session else ("", None)
    values = {
        "role": None if role is None else role.value,
        "may_operate": allows(role, Role.OPERATOR),
        "csrf": csrf_token(token) if token else "",
        **context,
    }
    return templates.TemplateResponse(request, template, values, status_code=status_code)


def _to_login() -> Response:
    return RedirectResponse("/login", status_code=303)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    return _login_page(request, error=None)


def _login_page(request: Request, error: str | None, status_code: int = 200) -> Response:
    """The sign-in form, with a fresh CSRF value in both the form and a cookie (double submit:
    a page on another site can post the form but cannot read or set that cookie)."""
    nonce = secrets.token_urlsafe(16)
    answer = _page(
        request, "login.html", None, status_code=status_code, error=error, login_csrf=nonce
    )
    answer.set_cookie(
        LOGIN_COOKIE, nonce, httponly=True, samesite="strict", path="/login", max_age=3600
    )
    return answer


@router.post("/login")
def login(
    request: Request, token: Annotated[str, Form()] = "", csrf: Annotated[str, Form()] = ""
) -> Response:
    expected = request.cookies.get(LOGIN_COOKIE, "")
    if not expected or not hmac.compare_digest(expected, csrf):
        return _login_page(request, "The form expired: sign in again.", status_code=403)
    tokens: Tokens = request.app.state.tokens
    if tokens.role_of(token.strip()) is None:
        return _login_page(request, "That token is not known.", status_code=401)
    answer = RedirectResponse("/", status_code=303)
    answer.set_cookie(
        COOKIE,
        token.strip(),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    answer.delete_cookie(LOGIN_COOKIE, path="/login")
    return answer


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
    session = _session(request)
    if session is not None and not csrf_ok(session[0], csrf):
        return Response("CSRF token missing or wrong", status_code=403)
    answer = _to_login()
    answer.delete_cookie(COOKIE, path="/")
    return answer


@router.get("/", response_class=HTMLResponse)
def schedules(request: Request, q: str = "", state: str = "", page: int = 1) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    beat: DurableBeat = request.app.state.beat
    wanted = state if state in STATES else None
    page = max(page, 1)
    found = beat.page(q.strip(), wanted, offset=(page - 1) * PAGE_SIZE, limit=PAGE_SIZE)
    pages = max(1, -(-found.matched // PAGE_SIZE))
    if page > pages:  # past the end (the filter matched fewer): show the last page
        page = pages
        found = beat.page(q.strip(), wanted, offset=(page - 1) * PAGE_SIZE, limit=PAGE_SIZE)
    rows = [_row(v) for v in found.schedules]
    status = beat.status()

    def link(number: int) -> str:
        return "/?" + urlencode(
            {k: v for k, v in (("q", q), ("state", state), ("page", number)) if v}
        )

    return _page(
        request,
        "schedules.html",
        session,
        rows=rows,
        total=found.total,
        matched=found.matched,
        q=q,
        state=state,
        states=STATES,
        page=page,
        pages=pages,
        first=(page - 1) * PAGE_SIZE + 1 if found.matched else 0,
        last=min(page * PAGE_SIZE, found.matched),
        prev_link=link(page - 1) if page > 1 else None,
        next_link=link(page + 1) if page < pages else None,
        status=status,
    )


def _row(view: ScheduleView) -> dict[str, Any]:
    tz = view.tz
    return {
        "name": view.name,
        "words": describe(view.definition.spec),
        "tz": tz,
        "next_tick": view.next_tick,
        "last_tick": None if view.last_tick_ms is None else tick_isoformat(view.last_tick_ms, tz),
        "state": view.state,
        "state_reason": view.state_reason,
        "last_outcome": view.last_outcome,
        "source": view.source,
    }


@router.get("/schedules/{name:path}", response_class=HTMLResponse)
def schedule(request: Request, name: str, cursor: str | None = None, done: str = "") -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    return _detail(request, session, name, cursor=cursor, message=DONE.get(done))


def _detail(
    request: Request,
    session: tuple[str, Role],
    name: str,
    *,
    cursor: str | None = None,
    message: str | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    beat: DurableBeat = request.app.state.beat
    try:
        detail = beat.get(name, count=10)
        history = beat.history(name, limit=HISTORY_PAGE, cursor=cursor)
    except ScheduleNotFound:
        return _page(request, "missing.html", session, status_code=404, name=name)
    flower = request.app.state.flower_url
    last = detail.last_tick_ms
    return _page(
        request,
        "schedule.html",
        session,
        status_code=status_code,
        s=detail,
        last_tick=None if last is None else tick_isoformat(last, detail.tz),
        events=history.events,
        next_cursor=history.next_cursor,
        paged=cursor is not None,
        flower=flower.rstrip("/") if flower else None,
        message=message,
        error=error,
        run_key=secrets.token_hex(8),  # Run now's idempotency key: a double submit runs once
    )


@router.post("/schedules/{name:path}/{action}")
def act(
    request: Request,
    name: str,
    action: str,
    csrf: Annotated[str, Form()] = "",
    run: Annotated[str, Form()] = "",
) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    needed = ACTIONS.get(action)
    if needed is None:
        return Response("unknown action", status_code=404)
    if not csrf_ok(session[0], csrf):
        return Response("CSRF token missing or wrong", status_code=403)
    if not allows(session[1], needed):
        return Response(f"this needs the {needed.value} role", status_code=403)
    beat: DurableBeat = request.app.state.beat
    try:
        if action == "trigger":
            beat.trigger(name, idempotency_key=f"console-{run}" if run else None)
        else:
            getattr(beat, action)(name)
    except DurableBeatError as exc:
        return _detail(request, session, name, error=str(exc), status_code=409)
    return RedirectResponse(f"/schedules/{quote(name, safe='')}?done={action}", status_code=303)
