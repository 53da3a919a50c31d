"""The daemon's client: typed async calls over the unix socket.

:class:`DaemonClient` speaks HTTP/1.1 to the daemon of one ``RECURSA_HOME``
with the token from ``daemon.token``. It never starts a daemon (that is
:mod:`recursa.daemon.process`): a daemon that cannot be reached is a
:class:`~recursa.errors.DaemonError` saying so in one line.

Idempotency: every mutating call carries this client's id (random, one per
client object) and a fresh command id. When the connection drops before a
reply, the call is sent once more with the *same* ids, after waiting (up to
``reconnect_window``) for the daemon to accept connections again; the daemon
answers a repeated command with its stored result, or ``uncertain`` when
its outcome was lost in a crash (→ :class:`~recursa.errors.UncertainCommand`).

Event streams: :meth:`DaemonClient.events` yields records in order; when the
connection drops (or falls silent past ``stream_timeout``, three missed
heartbeats by default) it reconnects from the last ``seq`` it yielded, so
nothing is missed or repeated, and gives up with a DaemonError after
``reconnect_window`` without a connection. Transient records (``seq == 0``)
sent while disconnected are lost; they are never stored.

Errors from the daemon become the matching error class with the daemon's
one-line message (see :mod:`recursa.daemon.errormap`).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import httpx2

from recursa.daemon.errormap import error_from_wire, one_line
from recursa.daemon.paths import DaemonPaths, read_state, read_token
from recursa.errors import DaemonError
from recursa.protocol.control import AddSchedule, GoalAction, GoalInfo, ScheduleInfo, SetGoal
from recursa.protocol.events import EventRecord, event_from_dict, json_text
from recursa.protocol.wire import (
    API_PREFIX,
    HEADER_CLIENT,
    HEADER_COMMAND,
    HEARTBEAT_SECONDS,
    CreateSession,
    DaemonStatus,
    HarnessDecision,
    HarnessDetail,
    HarnessEntry,
    HarnessPrompt,
    HarnessRevert,
    Receipt,
    RefineReply,
    RefineRequest,
    SendMessage,
    SessionInfo,
    Shutdown,
    UsageNode,
    from_json,
    to_json,
)

DEFAULT_TIMEOUT = 120.0
CONNECT_TIMEOUT = 5.0
RECONNECT_WINDOW = 30.0
STREAM_TIMEOUT = 3 * HEARTBEAT_SECONDS
QUIET_PIECE = 30.0
"""Longest wait one ``wait-quiet`` request asks the daemon for."""
REFINE_TIMEOUT = 600.0
"""Seconds ``refine`` may wait for its reply: it is a model call."""
_BACKOFF_FIRST = 0.05
_BACKOFF_MAX = 1.0
T = TypeVar("T")


class _NotRunning(Exception):
    """Nothing accepted the connection: the request was not sent."""


class _Dropped(Exception):
    """The connection broke after the request may have been sent."""


class DaemonClient:
    """A client of the daemon serving ``home``. Use as ``async with``, or call :meth:`aclose`.

    ``socket`` overrides where to connect (tests put a proxy there);
    ``timeout`` bounds one call's reply."""

    def __init__(
        self,
        home: Path | str,
        *,
        socket: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        reconnect_window: float = RECONNECT_WINDOW,
        stream_timeout: float = STREAM_TIMEOUT,
    ) -> None:
        self._paths = DaemonPaths.for_home(home)
        self._socket = socket
        self._timeout = timeout
        self._reconnect_window = reconnect_window
        self._stream_timeout = stream_timeout
        self._http: httpx2.AsyncClient | None = None
        self.client_id = secrets.token_hex(8)

    async def __aenter__(self) -> DaemonClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # -- the routes ---------------------------------------------------------------------------

    async def status(self) -> DaemonStatus:
        return from_json(DaemonStatus, await self._call("GET", "/status"))

    async def probe(self) -> DaemonStatus | None:
        """The status, or None when no daemon accepts a connection (or none ever
        ran here, or the connection broke: it is going away). Never retries."""
        try:
            self._client()
            response = await self._send("GET", "/status", None, {})
        except (_NotRunning, _Dropped):
            return None
        except DaemonError:
            if read_token(self._paths) is None:
                return None
            raise
        return from_json(DaemonStatus, _decode(response, "GET", "/status"))

    async def create_session(self, request: CreateSession) -> SessionInfo:
        data = await self._call("POST", "/sessions", body=to_json(request), mutating=True)
        return from_json(SessionInfo, data)

    async def sessions(self) -> list[SessionInfo]:
        data = await self._call("GET", "/sessions")
        if not isinstance(data, list):
            raise DaemonError("the daemon sent a malformed session list")
        return [from_json(SessionInfo, item) for item in data]

    async def session(self, ref: str) -> SessionInfo:
        return from_json(SessionInfo, await self._call("GET", _session_path(ref)))

    async def send(self, ref: str, request: SendMessage) -> Receipt:
        path = _session_path(ref, "messages")
        data = await self._call("POST", path, body=to_json(request), mutating=True)
        return from_json(Receipt, data)

    async def interrupt(self, ref: str) -> SessionInfo:
        data = await self._call("POST", _session_path(ref, "interrupt"), mutating=True)
        return from_json(SessionInfo, data)

    async def stop(self, ref: str) -> SessionInfo:
        data = await self._call("POST", _session_path(ref, "stop"), mutating=True)
        return from_json(SessionInfo, data)

    async def usage(self, ref: str) -> UsageNode:
        """The session's own and subtree usage, with its descendants' (``recursa usage``)."""
        return from_json(UsageNode, await self._call("GET", _session_path(ref, "usage")))

    async def wait_quiet(self, ref: str, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait until the session's whole tree is quiet (it and every descendant
        idle, nothing queued for it): True; False once ``timeout`` seconds have
        passed (None: no limit). The daemon is asked in pieces of at most
        :data:`QUIET_PIECE` seconds, so a long wait never meets the reply
        timeout, and a daemon restart in between is survived like any call's."""
        path = _session_path(ref, "wait-quiet")
        piece_max = min(QUIET_PIECE, self._timeout / 2)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            left = piece_max if deadline is None else deadline - time.monotonic()
            data = await self._call("POST", path, body={"timeout": max(0.0, min(piece_max, left))})
            quiet = data.get("quiet") if isinstance(data, dict) else None
            if not isinstance(quiet, bool):
                raise DaemonError(f"the daemon sent a malformed reply to POST {path}")
            if quiet:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    # -- the Continual Harness ----------------------------------------------------------------
    # ``ref`` names an entry by id, unique id prefix or title.

    async def harness_list(
        self, *, kind: str | None = None, scope: str | None = None, status: str | None = None
    ) -> list[HarnessEntry]:
        """The newest version of every entry, oldest entry first, filtered when asked."""
        query = {k: v for k, v in (("kind", kind), ("scope", scope), ("status", status)) if v}
        path = "/harness/entries" + (f"?{urlencode(query)}" if query else "")
        return _list_of(HarnessEntry, await self._call("GET", path), path)

    async def harness_show(self, ref: str) -> HarnessDetail:
        """The newest version, every version, and the number of the one in force."""
        return from_json(HarnessDetail, await self._call("GET", _entry_path(ref)))

    async def harness_log(self, limit: int = 50) -> list[HarnessEntry]:
        """The newest ``limit`` versions of all entries, newest first."""
        path = f"/harness/log?limit={int(limit)}"
        return _list_of(HarnessEntry, await self._call("GET", path), path)

    async def harness_diff(
        self, ref: str, from_version: int | None = None, to_version: int | None = None
    ) -> str:
        """A unified diff between two versions (default: the newest and the one before)."""
        query = {
            k: str(v) for k, v in (("from", from_version), ("to", to_version)) if v is not None
        }
        path = _entry_path(ref, "diff") + (f"?{urlencode(query)}" if query else "")
        data = await self._call("GET", path)
        text = data.get("diff") if isinstance(data, dict) else None
        if not isinstance(text, str):
            raise DaemonError(f"the daemon sent a malformed reply to GET {path}")
        return text

    async def harness_revert(self, ref: str, to_version: int) -> HarnessEntry:
        """A new version equal to ``to_version`` (0: before the entry existed)."""
        body = to_json(HarnessRevert(to=to_version))
        data = await self._call("POST", _entry_path(ref, "revert"), body=body, mutating=True)
        return from_json(HarnessEntry, data)

    async def harness_approve(self, ref: str, reason: str = "") -> HarnessEntry:
        body = to_json(HarnessDecision(reason=reason))
        data = await self._call("POST", _entry_path(ref, "approve"), body=body, mutating=True)
        return from_json(HarnessEntry, data)

    async def harness_reject(self, ref: str, reason: str = "") -> HarnessEntry:
        body = to_json(HarnessDecision(reason=reason))
        data = await self._call("POST", _entry_path(ref, "reject"), body=body, mutating=True)
        return from_json(HarnessEntry, data)

    async def harness_prompt(self, session: str) -> HarnessPrompt:
        """Exactly the supplement the session's next model call gets."""
        return from_json(HarnessPrompt, await self._call("GET", _session_path(session, "prompt")))

    async def refine(self, session: str, instructions: str | None = None) -> RefineReply:
        """Run a refinement over the session's recent events (a model call)."""
        body = to_json(RefineRequest(instructions=instructions))
        path = _session_path(session, "refine")
        data = await self._call(
            "POST", path, body=body, mutating=True, timeout=max(self._timeout, REFINE_TIMEOUT)
        )
        return from_json(RefineReply, data)

    # -- goals and schedules ------------------------------------------------------------------

    async def goal(self, session: str) -> GoalInfo | None:
        """The session's current goal, or None when it has none."""
        data = await self._call("GET", _session_path(session, "goal"))
        return None if data is None else from_json(GoalInfo, data)

    async def set_goal(self, session: str, objective: str, budget: int | None = None) -> GoalInfo:
        """Give the session a goal (replacing any); it starts working toward it."""
        body = to_json(SetGoal(objective=objective, budget=budget))
        data = await self._call("PUT", _session_path(session, "goal"), body=body, mutating=True)
        return from_json(GoalInfo, data)

    async def change_goal(self, session: str, action: GoalAction) -> GoalInfo:
        """``pause``, ``resume`` or ``clear`` the session's goal."""
        path = _session_path(session, f"goal/{action}")
        return from_json(GoalInfo, await self._call("POST", path, mutating=True))

    async def schedules(
        self, session: str | None = None, *, finished: bool = False
    ) -> list[ScheduleInfo]:
        """Scheduled jobs oldest first (of one session); ended ones too with ``finished``."""
        query = {"all": "1" if finished else "0", **({"session": session} if session else {})}
        path = f"/schedules?{urlencode(query)}"
        return _list_of(ScheduleInfo, await self._call("GET", path), path)

    async def add_schedule(self, session: str, request: AddSchedule) -> ScheduleInfo:
        path = _session_path(session, "schedules")
        data = await self._call("POST", path, body=to_json(request), mutating=True)
        return from_json(ScheduleInfo, data)

    async def cancel_schedule(self, job: int) -> ScheduleInfo:
        data = await self._call("DELETE", f"/schedules/{int(job)}", mutating=True)
        return from_json(ScheduleInfo, data)

    async def shutdown(self, *, force: bool = False) -> None:
        """Ask the daemon to stop; returns once it has begun (it exits soon after)."""
        body = to_json(Shutdown(force=force))
        await self._call("POST", "/shutdown", body=body, mutating=True, retry=False)

    async def events(
        self, ref: str, *, after: int = 0, follow: bool = False
    ) -> AsyncIterator[EventRecord]:
        """The session's records with ``seq > after``; with ``follow``, then each
        new one as it happens, until the consumer stops (close the iterator:
        ``contextlib.aclosing``). See the module docstring for reconnection."""
        cursor = after
        path = _session_path(ref, "events")
        connected_once = False
        deadline: float | None = None
        delay = _BACKOFF_FIRST
        while True:
            params = {"after": str(cursor), "follow": "1" if follow else "0"}
            try:
                async with self._client().stream(
                    "GET", API_PREFIX + path, params=params, timeout=self._stream_timeout
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        raise _error_of(response)
                    connected_once = True
                    async for line in response.aiter_lines():
                        record = _parse_line(line)
                        if record is None:
                            continue
                        if 0 < record.seq <= cursor:
                            continue  # already yielded before a reconnect
                        if record.seq:
                            cursor = record.seq
                        deadline, delay = None, _BACKOFF_FIRST
                        yield record
                if not follow:
                    return
                # A followed stream ends only with a shutdown line; anything
                # else is a connection cut short: resume.
            except (httpx2.ConnectError, httpx2.ConnectTimeout, FileNotFoundError) as exc:
                if not connected_once:
                    raise self._not_running() from exc
            except (httpx2.TransportError, httpx2.TimeoutException, _Dropped):
                pass
            now = time.monotonic()
            if deadline is None:
                deadline = now + self._reconnect_window
            if now >= deadline:
                raise DaemonError(
                    f"lost the event stream of {ref} and could not reconnect within "
                    f"{self._reconnect_window:g}s: is the daemon running? (recursa daemon status)"
                )
            await asyncio.sleep(min(delay, max(0.0, deadline - now)))
            delay = min(delay * 2, _BACKOFF_MAX)

    # -- transport ----------------------------------------------------------------------------

    def _client(self) -> httpx2.AsyncClient:
        if self._http is None:
            token = read_token(self._paths)
            if token is None:
                raise self._not_running()
            transport = httpx2.AsyncHTTPTransport(uds=str(self._socket_path()), retries=0)
            self._http = httpx2.AsyncClient(
                transport=transport,
                base_url="http://recursa",
                headers={"authorization": f"Bearer {token}"},
                timeout=httpx2.Timeout(self._timeout, connect=CONNECT_TIMEOUT),
                trust_env=False,
            )
        return self._http

    def _socket_path(self) -> Path:
        if self._socket is not None:
            return self._socket
        state = read_state(self._paths)
        return Path(state.socket) if state is not None else self._paths.socket

    def _not_running(self) -> DaemonError:
        return DaemonError(
            f"no daemon is running for RECURSA_HOME {self._paths.home}: recursa daemon start"
        )

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        mutating: bool = False,
        retry: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 -- a read timeout, passed to httpx2
    ) -> Any:
        headers = {"content-type": "application/json"} if body is not None else {}
        if mutating:
            headers[HEADER_CLIENT] = self.client_id
            headers[HEADER_COMMAND] = secrets.token_hex(16)
        content = json_text(body).encode() if body is not None else None
        try:
            response = await self._send(method, path, content, headers, timeout)
        except _NotRunning:
            raise self._not_running() from None
        except _Dropped:
            if not retry:
                raise DaemonError(
                    f"the connection to the daemon broke during {method} {path}"
                ) from None
            response = await self._resend(method, path, content, headers, timeout)
        return _decode(response, method, path)

    async def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        headers: Mapping[str, str],
        timeout: float | None = None,  # noqa: ASYNC109 -- a read timeout, passed to httpx2
    ) -> httpx2.Response:
        """One request; ``timeout`` replaces the client's reply timeout (a long call)."""
        wait = self._timeout if timeout is None else timeout
        try:
            return await self._client().request(
                method,
                API_PREFIX + path,
                content=content,
                headers=headers,
                timeout=httpx2.Timeout(wait, connect=CONNECT_TIMEOUT),
            )
        except (httpx2.ConnectError, FileNotFoundError) as exc:
            raise _NotRunning() from exc
        except httpx2.ConnectTimeout:
            raise DaemonError(
                f"the daemon at {self._socket_path()} accepts no connections"
            ) from None
        except httpx2.TimeoutException:
            raise DaemonError(
                f"the daemon did not answer {method} {path} within {wait:g}s"
            ) from None
        except httpx2.TransportError as exc:
            raise _Dropped() from exc

    async def _resend(
        self,
        method: str,
        path: str,
        content: bytes | None,
        headers: Mapping[str, str],
        timeout: float | None = None,  # noqa: ASYNC109 -- a read timeout, passed to httpx2
    ) -> httpx2.Response:
        """Send once more with the same command id, once the daemon accepts a
        connection again (a refused connection sent nothing, so it is retried)."""
        deadline = time.monotonic() + self._reconnect_window
        delay = _BACKOFF_FIRST
        while True:
            try:
                return await self._send(method, path, content, headers, timeout)
            except _NotRunning:
                now = time.monotonic()
                if now >= deadline:
                    raise DaemonError(
                        f"lost the daemon during {method} {path} and it did not come back within "
                        f"{self._reconnect_window:g}s; the outcome is unknown (recursa agents)"
                    ) from None
                await asyncio.sleep(min(delay, deadline - now))
                delay = min(delay * 2, _BACKOFF_MAX)
            except _Dropped:
                raise DaemonError(
                    f"the connection to the daemon broke twice during {method} {path}; "
                    "the outcome is unknown (recursa agents)"
                ) from None


def _entry_path(ref: str, action: str | None = None) -> str:
    path = f"/harness/entries/{quote(ref, safe='')}"
    return f"{path}/{action}" if action else path


def _list_of(cls: type[T], data: object, path: str) -> list[T]:
    if not isinstance(data, list):
        raise DaemonError(f"the daemon sent a malformed reply to GET {path}")
    return [from_json(cls, item) for item in data]


def _session_path(ref: str, action: str | None = None) -> str:
    path = f"/sessions/{quote(ref, safe='')}"
    return f"{path}/{action}" if action else path


def _decode(response: httpx2.Response, method: str, path: str) -> Any:
    """A successful reply's JSON, or the error it carries, raised."""
    if not response.is_success:
        raise _error_of(response)
    try:
        return response.json()
    except ValueError:
        raise DaemonError(f"the daemon sent a malformed reply to {method} {path}") from None


def _error_of(response: httpx2.Response) -> Exception:
    try:
        error = response.json()["error"]
        kind, message = error["kind"], error["message"]
        if isinstance(kind, str) and isinstance(message, str):
            return error_from_wire(kind, message)
    except (ValueError, KeyError, TypeError):
        pass
    text = one_line(response.text)
    return DaemonError(f"the daemon answered HTTP {response.status_code}: {text}".rstrip(": "))


def _parse_line(line: str) -> EventRecord | None:
    """A record from one NDJSON line; None for a heartbeat or a blank line.
    An error line raises its error; a shutdown line raises DaemonError."""
    if not line.strip():
        return None
    try:
        data = json.loads(line)
        kind = data.get("type")
    except (ValueError, AttributeError):
        raise _Dropped() from None  # a line cut short by a broken connection
    if kind == "heartbeat":
        return None
    if kind == "shutdown":
        raise DaemonError("the daemon is shutting down")
    if kind == "error":
        error = data.get("error") or {}
        raise error_from_wire(str(error.get("kind")), str(error.get("message", "")))
    try:
        seq, session_id, ts = data.pop("seq"), data.pop("session_id"), data.pop("ts")
        if not isinstance(seq, int) or not isinstance(session_id, str):
            raise ValueError("bad record header")
        return EventRecord(
            seq=seq, session_id=session_id, ts=float(ts), event=event_from_dict(data)
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DaemonError(f"the daemon sent a malformed event: {one_line(str(exc))}") from None


__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "QUIET_PIECE",
    "RECONNECT_WINDOW",
    "REFINE_TIMEOUT",
    "STREAM_TIMEOUT",
    "DaemonClient",
]
