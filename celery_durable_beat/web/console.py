"""The web console at ``/`` (SPEC §9): server-rendered pages over ``DurableBeat``.

Signed in with an API token, exchanged at sign-in for a session (``web/session.py``): the
HttpOnly, SameSite=Strict cookie holds the session's signed id, never the token, and is
``Secure`` when the request came over HTTPS (directly, or through a proxy named by
``serve --forwarded-allow-ips``). Every form carries the session's CSRF value; failed sign-ins
are throttled per client address; signed-in pages are ``Cache-Control: no-store``. Jinja2
escapes every value. Buttons appear
only for roles that may use them, and the POST handlers check the role again (a hidden button
is not a permission). The schedules table is filtered and paged on the server, so a store of
10,000 schedules renders ``PAGE_SIZE`` rows.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from celery_durable_beat.control import DurableBeat
from celery_durable_beat.control.shown import Shown
from celery_durable_beat.control.views import BackfillResult, ScheduleView
from celery_durable_beat.exceptions import DurableBeatError, InvalidArgument, ScheduleNotFound
from celery_durable_beat.schedules.describe import describe, describe_exclude
from celery_durable_beat.settings import Role
from celery_durable_beat.web.auth import COOKIE, Tokens, allows
from celery_durable_beat.web.errors import ApiError, error_response
from celery_durable_beat.web.names import register_convertors
from celery_durable_beat.web.session import Session, Sessions, SignInThrottle, same_text

LOGIN_COOKIE = "durable_beat_login"
"""The sign-in form's CSRF value, for the form's own path only."""
PAGE_SIZE = 100
"""Schedules per page of the table."""
LAST_PAGE = 1_000_000
"""The highest page number read (100 million schedules); a larger one shows the last page,
as any page past the end does."""
HISTORY_PAGE = 25
STATES = ("active", "paused", "quarantined", "archived")
ACTIONS = {
    "pause": Role.OPERATOR,
    "resume": Role.OPERATOR,
    "trigger": Role.OPERATOR,
    "backfill": Role.OPERATOR,
}
ACTION_LOG = 25
"""Actions the schedule page shows, newest first (``actions NAME`` pages further)."""
DONE = {"pause": "Paused.", "resume": "Resumed: it ticks again from now.", "trigger": "Sent."}

templates = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
templates.env.filters["quote"] = lambda name: quote(str(name), safe="")


def _when(value: str | int | None, tz: str) -> str:
    """An instant for people: ``2026-12-01 03:30 EST`` in the schedule's zone (seconds only
    when there are some); ISO 8601 stays in the API and the page's ``title`` attributes."""
    if value is None:
        return ""
    if isinstance(value, int):
        value = _instant(value, tz)
        if value is None:
            return ""
    moment = datetime.fromisoformat(value).astimezone(ZoneInfo(tz))
    shape = "%Y-%m-%d %H:%M:%S %Z" if moment.second else "%Y-%m-%d %H:%M %Z"
    return moment.strftime(shape)


templates.env.filters["when"] = _when


def _instant(ms: int | None, tz: str) -> str | None:
    """A stored instant as ISO 8601, or None when it cannot be shown (a row written by hand or
    by an older version: ``control/shown.py``), so the page still answers."""
    return Shown(tz, None).instant("last_tick", ms)


register_convertors()
router = APIRouter(include_in_schema=False)


def _session(request: Request) -> Session | None:
    sessions: Sessions = request.app.state.sessions
    return sessions.find(request.cookies.get(COOKIE))


def _page(
    request: Request,
    template: str,
    session: Session | None,
    status_code: int = 200,
    **context: Any,
) -> Response:
    role = None if session is None else session.role
    values = {
        "role": None if role is None else role.value,
        "actor": None if session is None else session.actor,
        "may_operate": allows(role, Role.OPERATOR),
        "csrf": "" if session is None else session.csrf,
        **context,
    }
    answer = templates.TemplateResponse(request, template, values, status_code=status_code)
    answer.headers["Cache-Control"] = "no-store"  # no signed-in page stays in a shared cache
    return answer


def _secure(request: Request) -> bool:
    """Whether the browser reached us over HTTPS: uvicorn sets the scheme from
    ``X-Forwarded-Proto`` only for the proxies ``serve --forwarded-allow-ips`` names."""
    return request.url.scheme == "https"


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


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
        LOGIN_COOKIE,
        nonce,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
        path="/login",
        max_age=3600,
    )
    return answer


@router.post("/login")
def login(
    request: Request, token: Annotated[str, Form()] = "", csrf: Annotated[str, Form()] = ""
) -> Response:
    """Exchange a token for a new session (a new id and CSRF value at every sign-in)."""
    expected = request.cookies.get(LOGIN_COOKIE, "")
    if not expected or not same_text(expected, csrf):
        return _login_page(request, "The form expired: sign in again.", status_code=403)
    throttle: SignInThrottle = request.app.state.throttle
    wait = throttle.wait(_client(request))
    if wait > 0:
        answer = _login_page(
            request, f"Too many failed sign-ins: try again in {wait:.0f} s.", status_code=429
        )
        answer.headers["Retry-After"] = str(max(1, round(wait)))
        return answer
    tokens: Tokens = request.app.state.tokens
    caller = tokens.identify(token.strip())
    if caller is None:
        throttle.failed(_client(request))
        return _login_page(request, "That token is not known.", status_code=401)
    throttle.succeeded(_client(request))
    sessions: Sessions = request.app.state.sessions
    sessions.end(request.cookies.get(COOKIE))  # a sign-in over a session replaces it
    _, cookie = sessions.start(caller.role, caller.name)
    answer = RedirectResponse("/", status_code=303)
    answer.set_cookie(
        COOKIE,
        cookie,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
        path="/",
        max_age=int(sessions.ttl),
    )
    answer.delete_cookie(LOGIN_COOKIE, path="/login")
    return answer


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
    """Sign-out ends the session on the server: its cookie, replayed, signs nobody in."""
    session = _session(request)
    if session is not None and not same_text(session.csrf, csrf):
        return _refused(403, "CSRF token missing or wrong: reload the page")
    sessions: Sessions = request.app.state.sessions
    sessions.end(request.cookies.get(COOKIE))
    answer = _to_login()
    answer.delete_cookie(
        COOKIE, path="/", secure=_secure(request), httponly=True, samesite="strict"
    )
    return answer


def _refused(status: int, message: str) -> Response:
    """A console refusal in the API's error shape (SPEC §9: every 4xx has it)."""
    return error_response(ApiError(status, "forbidden" if status == 403 else "not_found", message))


@router.get("/", response_class=HTMLResponse)
def schedules(request: Request, q: str = "", state: str = "", page: int = 1) -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    beat: DurableBeat = request.app.state.beat
    wanted = state if state in STATES else None
    q = q.replace("\x00", "")  # no name holds a NUL, and PostgreSQL refuses one in a query
    page = min(max(page, 1), LAST_PAGE)
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
        "words": describe(view.definition.spec) + describe_exclude(view.definition.exclude),
        "kind": view.kind,
        "tz": tz,
        "next_tick": view.next_tick,
        "last_tick": _instant(view.last_tick_ms, tz),
        "invalid": bool(view.invalid),
        "state": view.state,
        "state_reason": view.state_reason,
        "last_outcome": view.last_outcome,
        "source": view.source,
    }


@router.get("/schedules/{name:anyname}", response_class=HTMLResponse)
def schedule(request: Request, name: str, cursor: str | None = None, done: str = "") -> Response:
    session = _session(request)
    if session is None:
        return _to_login()
    return _detail(request, session, name, cursor=cursor, message=DONE.get(done))


def _detail(
    request: Request,
    session: Session,
    name: str,
    *,
    cursor: str | None = None,
    message: str | None = None,
    error: str | None = None,
    status_code: int = 200,
    backfill: BackfillResult | None = None,
    window: tuple[str, str] = ("", ""),
) -> Response:
    beat: DurableBeat = request.app.state.beat
    try:
        detail = beat.get(name, count=10)
        history = beat.history(name, limit=HISTORY_PAGE, cursor=cursor)
        log = beat.actions(name, limit=ACTION_LOG)
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
        last_tick=_instant(last, detail.tz),
        events=history.events,
        next_cursor=history.next_cursor,
        paged=cursor is not None,
        flower=flower.rstrip("/") if flower else None,
        message=message,
        error=error,
        run_key=secrets.token_hex(8),  # Run now's idempotency key: a double submit runs once
        actions=log.actions,
        more_actions=log.next_cursor is not None,
        backfill=backfill,
        window=window,
    )


@router.post("/schedules/{name:anyname}/{action}")
def act(
    request: Request,
    name: str,
    action: str,
    csrf: Annotated[str, Form()] = "",
    run: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
    start: Annotated[str, Form(alias="from")] = "",
    end: Annotated[str, Form(alias="to")] = "",
    preview: Annotated[str, Form()] = "",
) -> Response:
    session = _session(request)
    refused = _refusal(session, action, csrf)
    if refused is not None or session is None:
        return refused or _to_login()
    beat: DurableBeat = request.app.state.beat
    why = Why(reason.strip() or None, session.actor)
    if action == "backfill":
        return _backfill(request, session, name, (start, end), bool(preview), why)
    try:
        if action == "trigger":
            key = f"console-{run}" if run else None
            beat.trigger(name, idempotency_key=key, reason=why.reason, actor=why.actor)
        else:
            getattr(beat, action)(name, reason=why.reason, actor=why.actor)
    except DurableBeatError as exc:
        return _detail(request, session, name, error=str(exc), status_code=_status(exc))
    return RedirectResponse(f"/schedules/{quote(name, safe='')}?done={action}", status_code=303)


@dataclass(frozen=True)
class Why:
    """What every console action records with it: the reason typed, and the signed-in token's
    name (SPEC §15)."""

    reason: str | None
    actor: str


def _refusal(session: Session | None, action: str, csrf: str) -> Response | None:
    """The answer to a console action that may not run: signed out, unknown, CSRF, role."""
    if session is None:
        return _to_login()
    needed = ACTIONS.get(action)
    if needed is None:
        return _refused(404, f"no console action {action!r}; there are {', '.join(ACTIONS)}")
    if not same_text(session.csrf, csrf):
        return _refused(403, "CSRF token missing or wrong: reload the page")
    if not allows(session.role, needed):
        return _refused(403, f"this needs the {needed.value} role")
    return None


def _status(exc: DurableBeatError) -> int:
    """422 for input the form can fix, 409 for a state that refuses the action."""
    return 422 if isinstance(exc, InvalidArgument) else 409


def _backfill(
    request: Request,
    session: Session,
    name: str,
    window: tuple[str, str],
    preview: bool,
    why: Why,
) -> Response:
    """The backfill form: a preview lists the ticks, a run publishes them; the page answers
    with the result either way (a repeated submit publishes nothing: SPEC §15)."""
    beat: DurableBeat = request.app.state.beat
    try:
        tz = beat.get(name, count=1).tz
        start, end = _form_instant("from", window[0], tz), _form_instant("to", window[1], tz)
        result = beat.backfill(
            name, start, end, dry_run=preview, reason=why.reason, actor=why.actor
        )
    except ScheduleNotFound:
        return _page(request, "missing.html", session, status_code=404, name=name)
    except DurableBeatError as exc:
        return _detail(
            request, session, name, error=str(exc), status_code=_status(exc), window=window
        )
    verb = "Would send" if preview else "Sent"
    done = (
        f"{verb} {len(result.ticks)} of {result.occurrences} occurrences "
        f"({result.already_enqueued} already enqueued)."
    )
    return _detail(request, session, name, message=done, backfill=result, window=window)


def _form_instant(label: str, text: str, tz: str) -> datetime:
    """A form's instant: ISO 8601 with an offset, or a wall time (``datetime-local``) in the
    schedule's zone; InvalidArgument naming the field otherwise."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"{label}: {text!r} is not a date and time; pick one, e.g. 2026-12-01 03:00",
            field=label,
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=ZoneInfo(tz))
