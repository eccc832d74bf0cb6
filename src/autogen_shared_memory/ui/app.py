"""The inspector's web app: Starlette routes, server-rendered Jinja2 pages, and the same data as JSON.

Every page is also JSON: ``?format=json`` or the page's path with ``.json`` (``/facts.json``). The security
model (see docs/ui.md): the app answers only requests addressed to a loopback name (a page of another site
cannot reach it by DNS rebinding), every response forbids framing and carries a Content-Security-Policy
that runs only the app's own script file and loads nothing from elsewhere, Jinja2 escapes every stored
string, and the one kind of write (approve or reject a held global write) needs an operator session, opened
with the operator token, and the session's CSRF token on the form.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import hmac
import json
import math
import secrets
import time
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..core.types import STATUSES, Fact, FactNotFoundError, MemoryAccessDenied, ScopeRef
from ..errors import InvalidInputError
from . import charts
from .data import Inspector, fact_json, hit_json

HERE = Path(__file__).parent
SESSION_COOKIE = "asm_operator"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
TABLE_CHARS = 240  # a fact's text in a table is cut here; its own page shows all of it
HEARTBEAT = 1.0  # seconds between keep-alive comments on the live stream


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response (static files and errors included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in SECURITY_HEADERS if n not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


# ---------------------------------------------------------------------------------------- rendering
def shown(text: object, limit: int | None = None) -> Markup:
    """Stored text as HTML: escaped, cut after ``limit`` characters, and every control, format (bidi
    override, zero-width) and line-separator character but newline and tab shown as a visible ``\\uXXXX``
    mark instead of acting on the page."""
    value = "" if text is None else str(text)
    cut = limit is not None and len(value) > limit
    if cut:
        value = value[:limit]
    out: list[str] = []
    plain: list[str] = []
    for ch in value:
        if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            out.append(str(escape("".join(plain))))
            plain.clear()
            code = ord(ch)
            mark = f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
            out.append(f'<span class="esc" title="U+{code:04X}">{mark}</span>')
        else:
            plain.append(ch)
    out.append(str(escape("".join(plain))))
    if cut:
        out.append('<span class="more">…</span>')
    return Markup("".join(out))


def when(ts: float | None) -> Markup:
    """A time as a ``<time>`` element showing local ``YYYY-MM-DD HH:MM:SS`` (``-`` for none)."""
    if ts is None:
        return Markup("-")
    moment = time.localtime(ts)
    shown = time.strftime("%Y-%m-%d %H:%M:%S", moment)
    return Markup(f'<time datetime="{time.strftime("%Y-%m-%dT%H:%M:%S%z", moment)}">{shown}</time>')


def size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(("html", "svg"), default_for_string=True, default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(shown=shown, when=when, size=size, json=_dumps)
    env.globals.update(statuses=STATUSES)
    return env


def jsonable(value: Any) -> Any:
    """Dataclasses, scopes, tuples and sets as JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if isinstance(value, Fact):
            return fact_json(value)
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, ScopeRef):
        return str(value)
    if isinstance(value, dict):
        return {str(jsonable(k)) if not isinstance(k, str) else k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ------------------------------------------------------------------------------------------ parsing
def parse_scope(text: str | None) -> ScopeRef | None:
    """``global``, ``group:ID`` or ``agent:ID`` (None for empty)."""
    if not text:
        return None
    if text == "global":
        return ScopeRef("global")
    kind, sep, owner = text.partition(":")
    if not sep or kind not in ("agent", "group"):
        raise InvalidInputError(f"scope must be global, group:ID or agent:ID, got {text[:80]!r}")
    return ScopeRef(kind, owner)  # type: ignore[arg-type]


def parse_time(text: str | None, what: str) -> float | None:
    """A time from a form: a ``datetime-local`` value (local time) or Unix seconds (None for empty)."""
    if not text:
        return None
    try:
        return float(text) if text.replace(".", "", 1).isdigit() else datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise InvalidInputError(f"{what} must be a date and time (YYYY-MM-DDTHH:MM) or Unix seconds") from None


def parse_int(text: str | None, what: str, default: int, low: int, high: int) -> int:
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidInputError(f"{what} must be a whole number") from None
    if not low <= value <= high:
        raise InvalidInputError(f"{what} must be from {low} to {high}")
    return value


def local_input(ts: float | None) -> str:
    """A time as a ``datetime-local`` input value."""
    return "" if ts is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


# -------------------------------------------------------------------------------------------- app
class UI:
    """The inspector's routes and their state.

    Args:
        inspector: the store access.
        token: the operator token (None: read-only; nobody can open an operator session).
    """

    def __init__(self, inspector: Inspector, token: str | None = None) -> None:
        self.inspector = inspector
        self.token = token
        self.env = templates()
        self.secret = secrets.token_bytes(32)  # signs CSRF tokens; a restart ends every session
        self.sessions: set[str] = set()
        self.closing = asyncio.Event()

    # ------------------------------------------------------------ sessions
    def session(self, request: Request) -> str | None:
        """The caller's operator session id, if it holds a valid one."""
        sid = request.cookies.get(SESSION_COOKIE)
        return sid if sid is not None and sid in self.sessions else None

    def csrf(self, sid: str) -> str:
        return hmac.new(self.secret, sid.encode(), hashlib.sha256).hexdigest()

    async def operator(self, request: Request) -> tuple[str, dict[str, str]]:
        """The session and form of an operator action; PermissionError unless both the session (opened with
        the token) and the form's CSRF token are valid."""
        if self.token is None or self.inspector.writer is None:
            raise PermissionError("the inspector is read-only: it was started without an operator token")
        sid = self.session(request)
        if sid is None:
            raise PermissionError("an operator session is needed: sign in with the operator token")
        form = await request.form()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not hmac.compare_digest(fields.get("csrf", ""), self.csrf(sid)):
            raise PermissionError("the form's CSRF token is missing or wrong: reload the page and try again")
        return sid, fields

    # ------------------------------------------------------------ responses
    def page(self, request: Request, name: str, data: dict[str, Any], **context: Any) -> Response:
        """The page ``name`` as HTML, or ``data`` as JSON when asked for (``?format=json`` or ``.json``)."""
        if wants_json(request):
            return JSONResponse(jsonable(data))
        sid = self.session(request)
        base = {
            "path": request.url.path,
            "operator": sid is not None,
            "can_sign_in": self.token is not None,
            "csrf": self.csrf(sid) if sid else "",
            "operator_id": self.inspector.operator_id,
            "backend": self.inspector.backend_name,
            "query": lambda **changes: query(request, **changes),
        }
        html = self.env.get_template(name).render({**data, **context, **base})
        return HTMLResponse(html)

    def error(self, request: Request, status: int, message: str) -> Response:
        if wants_json(request):
            return JSONResponse({"error": message}, status_code=status)
        return HTMLResponse(
            self.env.get_template("error.html").render(
                path=request.url.path, status=status, message=message, operator=False, can_sign_in=False
            ),
            status_code=status,
        )

    # ------------------------------------------------------------ pages
    async def overview(self, request: Request) -> Response:
        rows = await asyncio.to_thread(self.inspector.overview)
        activity = await asyncio.to_thread(self.inspector.activity, rows)
        data = {
            "scopes": [
                {
                    "scope": str(r.scope),
                    "counts": r.stats.counts,
                    "total": r.total,
                    "size_bytes": r.stats.size_bytes,
                    "embedding_model": r.stats.embedding_model,
                    "embedding_dim": r.stats.embedding_dim,
                    "last_write": r.stats.last_write,
                    "members": r.members,
                    "private": r.private,
                }
                for r in rows
            ],
            "writes_per_agent": dict(activity.writes.most_common()),
        }
        return self.page(
            request,
            "overview.html",
            data,
            rows=rows,
            timeline=charts.facts_over_time(activity.created),
            writers=charts.writes_per_agent(activity.writes),
        )

    async def facts(self, request: Request) -> Response:
        q = request.query_params
        scopes = await asyncio.to_thread(self.inspector.scopes)
        scope = parse_scope(q.get("scope")) or (scopes[0] if scopes else ScopeRef("global"))
        filters: dict[str, Any] = {
            "status": q.get("status") or None,
            "author": q.get("author") or None,
            "tag": q.get("tag") or None,
            "since": parse_time(q.get("since"), "since"),
            "until": parse_time(q.get("until"), "until"),
        }
        number = parse_int(q.get("page"), "page", 1, 1, 10**9)
        per_page = parse_int(q.get("per_page"), "per_page", 50, 1, 500)
        started = time.perf_counter()
        page = await asyncio.to_thread(
            functools.partial(self.inspector.list_facts, scope, page=number, per_page=per_page, **filters)
        )
        elapsed = time.perf_counter() - started
        data = {
            "scope": str(scope),
            "filters": filters,
            "page": page.page,
            "per_page": page.per_page,
            "total": page.total,
            "has_next": page.has_next,
            "facts": [fact_json(f) for f in page.facts],
            "server_ms": round(elapsed * 1000, 1),
        }
        return self.page(
            request,
            "facts.html",
            data,
            scopes=scopes,
            current=scope,
            result=page,
            form=q,
            table_chars=TABLE_CHARS,
        )

    async def fact(self, request: Request) -> Response:
        fact_id = str(request.path_params["fact_id"]).removesuffix(".json")
        view = await asyncio.to_thread(self.inspector.fact, fact_id)
        data = {
            "fact": fact_json(view.fact),
            "history": [dataclasses.asdict(e) for e in view.history],
            "chain": [fact_json(f) if isinstance(f, Fact) else {"id": f, "purged": True} for f in view.chain],
            "similar": [{"fact": fact_json(f), "cosine": c} for f, c in view.similar],
        }
        return self.page(request, "fact.html", data, view=view)

    async def search(self, request: Request) -> Response:
        q = request.query_params
        text = q.get("q", "")
        agent = q.get("agent") or None
        group = q.get("group") or None
        as_of = parse_time(q.get("as_of"), "as_of")
        top_k = parse_int(q.get("top_k"), "top_k", 10, 1, 100)
        agents, groups = await asyncio.to_thread(self.inspector.agents_and_groups)
        hits = []
        elapsed = 0.0
        if text.strip():
            started = time.perf_counter()
            hits = await asyncio.to_thread(
                self.inspector.search, text, agent_id=agent, group_id=group, as_of=as_of, top_k=top_k
            )
            elapsed = time.perf_counter() - started
        data = {
            "query": text,
            "as": agent or f"operator ({self.inspector.operator_id})",
            "agent": agent,
            "group": group,
            "as_of": as_of,
            "hits": [hit_json(h) for h in hits],
            "server_ms": round(elapsed * 1000, 1),
        }
        return self.page(
            request,
            "search.html",
            data,
            results=hits,
            agents=agents,
            groups=groups,
            as_of_input=local_input(as_of),
            form=q,
        )

    async def review(self, request: Request) -> Response:
        held = await asyncio.to_thread(self.inspector.pending)
        done = request.query_params.get("done")
        return self.page(request, "review.html", {"pending": [fact_json(f) for f in held]}, held=held, done=done)

    async def decide(self, request: Request) -> Response:
        _, fields = await self.operator(request)
        fact_id = str(request.path_params["fact_id"])
        action = str(request.path_params["action"])
        done = {"approve": "approved", "reject": "rejected"}.get(action)
        if done is None:
            return self.error(request, 404, "no such action")
        reason = fields.get("reason") or f"{done} in the inspector"
        if action == "approve":
            fact = await asyncio.to_thread(self.inspector.approve, fact_id, reason)
        else:
            fact = await asyncio.to_thread(self.inspector.reject, fact_id, reason)
        if wants_json(request) or "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"action": action, "fact": fact_json(fact)})
        return RedirectResponse(f"/review?{urlencode({'done': f'{done} {fact_id}'})}", status_code=303)

    async def live(self, request: Request) -> Response:
        recent = await asyncio.to_thread(self.inspector.recent, 50)
        return self.page(request, "live.html", {"recent": recent, "stream": "/live/events"}, changes=recent)

    async def events(self, request: Request) -> Response:
        """The change feed as server-sent events: one ``change`` event per change to a fact, from now on."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def deliver(change: Any) -> None:
            item = self.inspector.change_json(change)  # in the feed's thread: reading the fact never blocks the loop
            with contextlib.suppress(RuntimeError):  # the loop closed: the server is going away
                loop.call_soon_threadsafe(queue.put_nowait, item)

        subscription = await asyncio.to_thread(self.inspector.subscribe, deliver)

        async def stream() -> AsyncIterator[str]:
            try:
                yield "retry: 1000\n: listening\n\n"
                while not self.closing.is_set():
                    try:
                        item = await asyncio.wait_for(queue.get(), HEARTBEAT)
                    except TimeoutError:
                        if await request.is_disconnected():
                            break
                        yield ": ping\n\n"
                        continue
                    yield f"event: change\ndata: {json.dumps(jsonable(item))}\n\n"
            finally:
                await asyncio.to_thread(subscription.stop)

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def records(self, request: Request) -> Response:
        q = request.query_params
        agents, groups = await asyncio.to_thread(self.inspector.agents_and_groups)
        agent = q.get("agent") or (agents[0] if agents else None)
        group = q.get("group") or (groups[0] if groups else None)
        directory = await asyncio.to_thread(self.inspector.directory)
        tasks = await asyncio.to_thread(self.inspector.tasks)
        messages = await asyncio.to_thread(self.inspector.conversation, agent) if agent else []
        tools = await asyncio.to_thread(self.inspector.tool_history, agent) if agent else []
        cases = await asyncio.to_thread(self.inspector.case_log, group) if group else []
        data = {
            "agent": agent,
            "group": group,
            "directory": directory,
            "conversation": messages,
            "tool_history": tools,
            "tasks": tasks,
            "case_log": cases,
        }
        return self.page(request, "records.html", data, agents=agents, groups=groups)

    # ------------------------------------------------------------ sign in and out
    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return self.page(request, "login.html", {"signed_in": self.session(request) is not None}, failed=False)
        form = await request.form()
        given = form.get("token")
        if self.token is None:
            return self.error(request, 403, "the inspector is read-only: it was started without an operator token")
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), self.token.encode()):
            await asyncio.sleep(0.5)  # a guess costs time
            response = self.page(request, "login.html", {"signed_in": False}, failed=True)
            response.status_code = 403
            return response
        sid = secrets.token_urlsafe(32)
        self.sessions.add(sid)
        response = RedirectResponse("/review", status_code=303)
        response.set_cookie(SESSION_COOKIE, sid, httponly=True, samesite="strict", path="/")
        return response

    async def logout(self, request: Request) -> Response:
        sid = self.session(request)
        if sid is not None:
            form = await request.form()
            if hmac.compare_digest(str(form.get("csrf", "")), self.csrf(sid)):
                self.sessions.discard(sid)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response


def wants_json(request: Request) -> bool:
    return request.url.path.endswith(".json") or request.query_params.get("format") == "json"


def query(request: Request, **changes: Any) -> str:
    """The current page's query string with ``changes`` applied (None removes a key)."""
    params = dict(request.query_params)
    params.pop("format", None)
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = str(value)
    return "?" + urlencode(params)


def _dumps(value: Any) -> str:
    return json.dumps(jsonable(value), ensure_ascii=False)


def handled(ui: UI, handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` with the store's refusals turned into error pages (JSON for JSON requests)."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except FactNotFoundError as exc:
            return ui.error(request, 404, str(exc))
        except (MemoryAccessDenied, PermissionError) as exc:
            return ui.error(request, 403, str(exc))
        except (InvalidInputError, ValueError, TypeError) as exc:
            return ui.error(request, 400, str(exc))

    return run


def create_app(inspector: Inspector, *, token: str | None = None, hosts: Sequence[str] = ()) -> Starlette:
    """The inspector's ASGI app.

    Args:
        inspector: the store access (:func:`~.data.open_inspector`).
        token: the operator token; None: read-only (nobody can approve or reject).
        hosts: host names the app answers to besides the loopback ones (the ``--host`` it was bound to).

    Returns:
        The Starlette app (``app.state.ui`` is the :class:`UI`).
    """
    if token is not None and len(token) < 16:
        raise InvalidInputError("the operator token must be at least 16 characters")
    ui = UI(inspector, token)
    pages: list[tuple[str, Callable[[Request], Awaitable[Response]]]] = [
        ("/", ui.overview),
        ("/overview", ui.overview),
        ("/facts", ui.facts),
        ("/search", ui.search),
        ("/review", ui.review),
        ("/live", ui.live),
        ("/records", ui.records),
    ]
    routes: list[Route | Mount] = []
    for path, handler in pages:
        routes.append(Route(path, handled(ui, handler)))
        if path != "/":
            routes.append(Route(path + ".json", handled(ui, handler)))
    routes += [
        Route("/index.json", handled(ui, ui.overview)),
        Route("/fact/{fact_id}", handled(ui, ui.fact)),
        Route("/live/events", ui.events),
        Route("/review/{fact_id}/{action}", handled(ui, ui.decide), methods=["POST"]),
        Route("/login", handled(ui, ui.login), methods=["GET", "POST"]),
        Route("/logout", ui.logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        ui.closing.set()

    allowed = [*LOOPBACK_HOSTS, *hosts]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders), Middleware(TrustedHostMiddleware, allowed_hosts=allowed)],
        lifespan=lifespan,
    )
    app.state.ui = ui
    return app
