"""The daemon's API as one table of operations: pure values.

Each :class:`Operation` is one row: its name (the host's method and the
client's word for it), HTTP method and path, the request value it takes, the
reply value it gives, its audience (``person``: the CLI, the Agents View,
outside tools; ``kernel``: the kernel-side API, with a kernel token), and how
it is carried (idempotent by command key, a stream, a long poll, a status).
The rows live in :mod:`recursa.protocol.person_ops` and
:mod:`recursa.protocol.kernel_ops`, next to the request and reply values
they need; :data:`OPERATIONS` collects them.

Everything else is derived from the rows: the daemon's routes
(:mod:`recursa.daemon.routes`), the clients (:class:`recursa.daemon.client.DaemonClient`,
:mod:`recursa.api.client`), the OpenAPI document (:mod:`recursa.daemon.openapi`)
and the check that a host serves every row (:func:`recursa.daemon.host.missing_methods`).

A request is one value: its fields named in the path are path parameters,
the rest the query (``GET``, ``DELETE``) or the JSON body (other methods).
The host is called as ``host.NAME(request)`` (``host.NAME()`` without a
request type), with the command key after it for a ``command`` row; a
kernel row's host method gets the caller's session first:
``host.NAME(caller, request)``.
"""

from __future__ import annotations

import dataclasses
import re
import types
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, Union, get_args, get_origin, get_type_hints
from urllib.parse import quote

from recursa.protocol.plain import from_plain
from recursa.protocol.wire import to_json
from recursa.values import frozen

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
Audience = Literal["person", "kernel"]

Req = TypeVar("Req")
Rep = TypeVar("Rep")

_PARAM = re.compile(r"\{(\w+)(?::(\w+))?\}")
_QUERY_METHODS = ("GET", "DELETE")


@frozen
class Ack:
    """The reply of an operation that only says it was accepted."""


@dataclass(frozen=True)
class Operation(Generic[Req, Rep]):
    """One daemon operation. ``request`` is a dataclass or None (no request);
    ``reply`` the type of the reply: a dataclass, ``list[X]``, ``X | None``.

    ``command``: mutating and idempotent by the client's command key.
    ``stream``: the reply is an NDJSON stream of event records, not ``reply``.
    ``long_poll``: the host waits; the wait ends when the client goes away or
    the daemon stops. ``timeout``: seconds a client waits for the reply
    (None: its default). ``stops``: the daemon stops after replying.
    ``retry``: a client sends the request again when the connection drops."""

    name: str
    method: Method
    path: str
    request: type[Req] | None
    reply: Any
    audience: Audience
    summary: str
    command: bool = False
    status: int = 200
    stream: bool = False
    long_poll: bool = False
    timeout: float | None = None
    stops: bool = False
    retry: bool = True

    @property
    def route(self) -> str:
        """The route under the API prefix (kernel rows under ``/kernel``)."""
        return f"/kernel{self.path}" if self.audience == "kernel" else self.path

    @property
    def path_fields(self) -> tuple[str, ...]:
        return tuple(match.group(1) for match in _PARAM.finditer(self.path))

    @property
    def in_query(self) -> bool:
        """Whether the fields outside the path go in the query (else the body)."""
        return self.method in _QUERY_METHODS

    def url(self, request: Req) -> tuple[str, dict[str, str], dict[str, Any] | None]:
        """The route with its parameters filled in, the query, and the body."""
        data = to_json(request) if request is not None else {}
        path = _PARAM.sub(lambda m: quote(str(data.pop(m.group(1))), safe=""), self.route)
        if self.in_query:
            query = {k: _query_text(v) for k, v in data.items() if v is not None}
            return path, query, None
        return path, {}, data if self.request is not None else None


def operations() -> tuple[Operation[Any, Any], ...]:
    """Every row: the people's, then the kernels'."""
    from recursa.protocol import kernel_ops, person_ops

    return tuple(
        row
        for module in (person_ops, kernel_ops)
        for row in vars(module).values()
        if isinstance(row, Operation)
    )


def request_fields(cls: type[Any]) -> dict[str, Any]:
    """A request type's fields and their types (the annotations resolved)."""
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def query_value(kind: Any, raw: str, name: str) -> Any:
    """A query parameter as the field's type wants it (ValueError, one line)."""
    options = _options(kind)
    if bool in options:
        lowered = raw.lower()
        if lowered in ("1", "true", "yes"):
            return True
        if lowered in ("0", "false", "no"):
            return False
        raise ValueError(f"{name} must be 0 or 1, not {raw!r}")
    if int in options:
        if not (raw.isascii() and raw.lstrip("-").isdigit()):
            raise ValueError(f"{name} must be a whole number, not {raw!r}")
        return int(raw)
    if float in options:
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{name} must be a number, not {raw!r}") from None
    return raw


def encode(value: object) -> Any:
    """A reply value as JSON-ready data."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [encode(item) for item in value]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return to_json(value)


def decode(kind: Any, data: object) -> Any:
    """A reply of type ``kind`` (None: any JSON) from the daemon's JSON data
    (:func:`~recursa.protocol.plain.from_plain`); ValueError when it does not fit."""
    return data if kind is None else from_plain(kind, data)


def _options(kind: Any) -> tuple[Any, ...]:
    if get_origin(kind) in (Union, types.UnionType):
        return get_args(kind)
    return (kind,)


def _query_text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


__all__ = [
    "Ack",
    "Audience",
    "Method",
    "Operation",
    "decode",
    "encode",
    "operations",
    "query_value",
    "request_fields",
]
