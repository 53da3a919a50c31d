"""What the daemon serves, derived from the operation table.

A host is any object with a method for every row of its audience
(:func:`~recursa.protocol.operations.operations`), named as the row and
called as the table's module docstring says: ``host.NAME(request)``, with
the command key after it for a ``command`` row; a kernel host's method gets
the caller first. :class:`recursa.runtime.host.RuntimeHost` is the real one;
tests of the transport use fakes built on :func:`unserved`.

Errors are the ordinary error tree: ``NotFound`` (404), ``ModelUnavailable``
(422), ``UsageError``/``ValueError`` (400), ``UncertainCommand`` (409), any
other ``RecursaError`` by its class, and anything else is a bug (500).
A ``stream`` row's method is awaited (raising, e.g., ``NotFound`` before the
stream begins) and returns the async iterator of records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast, runtime_checkable

from recursa.errors import UsageError
from recursa.kernel import ApiCall
from recursa.protocol.operations import Ack, Audience, operations
from recursa.protocol.wire import Shutdown


class Host(Protocol):
    """The people's side of a host: every person row, and the stop."""

    async def shutdown(self, request: Shutdown) -> Ack:
        """Begin stopping: ``request.force`` skips snapshots and kills kernels.
        Returns once the stop has begun; the server exits when it is done."""
        ...


class KernelHost(Protocol):
    """The kernels' side of a host: every kernel row, and the token's session."""

    def session_of_token(self, token: str) -> str | None:
        """The session a kernel token was minted for, or None."""
        ...


@runtime_checkable
class RelayingKernelHost(KernelHost, Protocol):
    """A kernel host whose kernels may also reach the kernel API over their own
    channels (:mod:`recursa.kernel.relay`) rather than the kernel socket."""

    def serve_in_process(self, call_as: Callable[[str], ApiCall]) -> None:
        """From now on, relay such kernels' requests through ``call_as(token)``:
        the kernel channel's app, called in this process with the session's
        kernel token (:func:`recursa.daemon.app.create_apps` calls this)."""
        ...


def missing_methods(host: object, audience: Audience) -> list[str]:
    """The rows of ``audience`` that ``host`` has no method for."""
    return [
        op.name
        for op in operations()
        if op.audience == audience and not callable(getattr(host, op.name, None))
    ]


def kernel_host_of(host: object) -> KernelHost | None:
    """``host`` as a :class:`KernelHost` when it serves every kernel row (the
    runtime's host serves both audiences), else None."""
    if callable(getattr(host, "session_of_token", None)) and not missing_methods(host, "kernel"):
        return host  # type: ignore[return-value]
    return None


def served(host: object) -> tuple[Host, KernelHost | None]:
    """The people's and the kernels' hosts of ``host``: its ``people`` and
    ``kernels`` when it hands them out (the runtime's does, by composition),
    else ``host`` itself for both; the kernels' is None when it serves none."""
    people = cast(Host, getattr(host, "people", host))
    kernels = getattr(host, "kernels", host)
    return people, kernel_host_of(kernels)


def unserved(audience: Audience) -> type:
    """A base class with a method for every row of ``audience`` that refuses
    (UsageError): a fake host overrides what its tests use and serves every
    row, including ones added after it was written."""

    def refusal(name: str) -> Any:
        async def method(self: object, *args: object) -> Any:
            raise UsageError(f"{type(self).__name__} does not serve {name}")

        method.__name__ = name
        return method

    rows = {op.name: refusal(op.name) for op in operations() if op.audience == audience}
    return type(f"Unserved{audience.title()}Host", (), rows)


__all__ = [
    "Host",
    "KernelHost",
    "RelayingKernelHost",
    "kernel_host_of",
    "missing_methods",
    "served",
    "unserved",
]
