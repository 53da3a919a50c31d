"""What the two SDK-backed providers share: the key, redaction, model info, and
the failures both SDKs raise alike.

The OpenAI and Anthropic SDKs are generated from one template, so their
exception trees have the same shape (a timeout is a connection error; a
response that does not validate has a ``message``). Where they differ is
data, an :class:`SDKErrors` naming each SDK's classes, not a subclass per
vendor. What is the vendor's own (the status errors' bodies, the stream's
events) stays in :mod:`recursa.models.openai` and :mod:`recursa.models.anthropic`.

The SDKs are the transport, not the parser. A request body is built as a
plain dict and sent with the client's ``post(..., cast_to=httpx2.Response,
stream=True)``: auth, base URL, headers, timeouts and the status errors
(``APIStatusError`` and its kin, raised before any byte of the body is read)
stay the SDK's. Under the SDK's HTTP client, a plain-HTTP base URL that no
proxy covers (a local server) gets :class:`recursa.models._http.LeanTransport`
instead of httpx's own transport. The body of the response is read as raw bytes, decoded by
:mod:`recursa.models._sse`, and turned into :data:`StreamEvent` values by a
vendor's :class:`StreamReader` straight from ``json.loads`` output, without
the SDKs' per-chunk pydantic objects.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import anyio
import httpx2

from recursa.config import Config, ProviderConfig
from recursa.errors import ModelUnavailable
from recursa.models import _errors, catalog
from recursa.models._http import lean_transport_for
from recursa.models._sse import ServerSentEvent, SSEDecoder
from recursa.models.types import Done, Failed, ModelInfo, StreamEvent

DRAIN_SECONDS = 0.1
"""How long the rest of a body is read after the stream's own end marker
(OpenAI's ``[DONE]``), so that the connection goes back to the pool; a server
that holds it open longer loses the connection instead of delaying the reply.
The SDKs allow the same."""

_BROKEN = (httpx2.RequestError, ssl.SSLError, anyio.EndOfStream)
"""What a connection that breaks mid-body raises (the SDKs' own list)."""

_MALFORMED = (ValueError, TypeError, AttributeError, KeyError)
"""What reading an event's data raises when it is not the JSON, or not the
shape, the vendor sends: the server's fault, so a ``malformed`` failure."""


class _Client(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Client)


@dataclass(frozen=True, slots=True)
class SDKErrors:
    """One SDK's exception classes for the failures every SDK shares."""

    base: type[Exception]
    timeout: type[Exception]
    connection: type[Exception]
    validation: type[Exception]


class SDKProvider(Generic[C]):
    """The shared half of an SDK-backed provider over an SDK client ``C``; the
    vendor's class adds ``stream()``, which builds the request body and a
    :class:`StreamReader` and hands both to :meth:`_run`, ``_open()``, which
    sends the body through the SDK client, and the translation of its status errors.

    Invariant: ``_secrets`` holds every secret a failure message could echo
    (this provider's key and the configuration's), never the placeholder key,
    and every message built here has them replaced.
    """

    def __init__(
        self,
        table: ProviderConfig,
        config: Config,
        *,
        client: Callable[..., C],
        http_client: Callable[..., httpx2.AsyncClient],
        errors: SDKErrors,
        placeholder_key: str,
        key_required: bool,
        key_hint: str = "",
    ) -> None:
        """Take the key from ``table`` and build the SDK ``client`` with it.

        Without a key, a provider that needs one (``key_required``: the
        vendor's own endpoint) raises :class:`ModelUnavailable` naming the
        variable to set, with ``key_hint`` appended; any other sends
        ``placeholder_key`` (local servers need none, the SDKs insist on one).
        ``http_client`` is the SDK's class of HTTP client (its defaults for
        limits, timeout and redirects), built over the lean transport where
        :func:`~recursa.models._http.lean_transport_for` gives one.
        The SDK's own retries are off: retries belong to
        :func:`recursa.models.retry.with_retries`, which branches on failure kinds."""
        key = table.api_key
        if not key:
            if key_required:
                variable = (
                    table.api_key_env or f"providers.{table.name}.api_key_env in the configuration"
                )
                raise ModelUnavailable(
                    f"provider {table.name!r} needs an API key: set {variable}{key_hint}"
                )
            key = placeholder_key
        self.name = table.name
        self._config = config
        self._timeout = table.timeout
        self._errors = errors
        self._secrets = tuple(s for s in {key, *config.secrets} if s != placeholder_key)
        transport = lean_transport_for(table.base_url)
        self._client = client(
            api_key=key,
            base_url=table.base_url,
            timeout=table.timeout,
            max_retries=0,
            http_client=None if transport is None else http_client(transport=transport),
        )

    def info(self, model: str) -> ModelInfo:
        """Native tool calls; the context window from the catalog or the configuration."""
        ref = f"{self.name}/{model}"
        return ModelInfo(
            ref=ref,
            native_tools=True,
            context_window=catalog.context_window(ref, self._config.context_windows),
        )

    stall_detail = "no data within"
    """How a timeout while the body streams is described (before the timeout in seconds)."""

    async def _open(self, body: dict[str, object] | bytes) -> httpx2.Response:
        """Send ``body`` through the SDK client; the response, its body not yet read.

        Raises the SDK's own errors (status, connection, timeout)."""
        raise NotImplementedError

    def _failure(self, exc: Exception) -> Failed:
        """Translate an SDK exception raised before the response's body was read."""
        raise NotImplementedError

    async def _run(
        self, body: dict[str, object] | bytes, reader: StreamReader
    ) -> AsyncIterator[StreamEvent]:
        """Send ``body`` and yield what ``reader`` makes of the streamed reply,
        ending with exactly one ``Done`` or ``Failed``.

        The response is closed whenever the stream ends, is closed early or is
        cancelled; ``CancelledError`` propagates unchanged."""
        try:
            response = await self._open(body)
        except self._errors.base as exc:
            yield self._failure(exc)
            return
        # An async generator; closed here rather than left to the event loop's finalizer.
        chunks = response.aiter_bytes()
        try:
            async for chunk in chunks:
                for event in reader.feed(chunk):
                    yield event
                if reader.finished:
                    return
                if reader.ended:
                    await _drain(chunks)
                    break
            for event in reader.close():
                yield event
        except httpx2.TimeoutException:
            yield _errors.failure(self.name, "timeout", f"{self.stall_detail} {self._timeout:g} s")
        except _BROKEN as exc:
            yield _errors.failure(
                self.name, "malformed", f"cut short: {_named(exc)}", self._secrets
            )
        finally:
            await chunks.aclose()
            await response.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client and its pooled connections."""
        await self._client.close()

    def _shared_failure(self, exc: Exception) -> Failed | None:
        """The failure for a timeout, a connection that could not be made or
        an invalid response; None for the vendor's own errors. (Once the body
        streams, :meth:`_run` translates the transport's errors itself.)"""
        name, secrets = self.name, self._secrets
        if isinstance(exc, self._errors.timeout):
            return _errors.failure(
                name, "timeout", f"no response within {self._timeout:g} s", secrets
            )
        if isinstance(exc, self._errors.connection):
            return _errors.failure(name, "network", _cause(exc), secrets)
        if isinstance(exc, self._errors.validation):
            return _errors.failure(name, "malformed", getattr(exc, "message", str(exc)), secrets)
        return None

    def _unknown_failure(self, exc: Exception) -> Failed:
        """The failure for an SDK error neither half recognises."""
        return _errors.failure(self.name, "unknown", f"{type(exc).__name__}: {exc}", self._secrets)


class StreamFailure(Exception):
    """Raised by a reader for an event that ends the stream as ``failed``
    (an error event sent inside the open stream)."""

    def __init__(self, failed: Failed) -> None:
        super().__init__(failed.message)
        self.failed = failed


class StreamReader:
    """One streamed reply's bytes in, recursa's events out; a vendor subclass
    gives :meth:`read` (one decoded event) and :meth:`result` (the end).

    Pure: no I/O, so the same bytes give the same events over HTTP and in tests.

    Invariants: the events of :meth:`feed` and :meth:`close` together end
    with exactly one ``Done`` or ``Failed``, and once :attr:`finished` is set
    nothing more is read. :attr:`ended` means the vendor's end marker arrived
    (the rest of the body is ignored; :meth:`close` gives the result).
    """

    __slots__ = ("_decoder", "ended", "finished", "secrets", "vendor")

    def __init__(self, vendor: str, secrets: tuple[str, ...] = ()) -> None:
        self.vendor = vendor
        self.secrets = secrets
        self.ended = False
        self.finished = False
        self._decoder = SSEDecoder()

    def read(self, sse: ServerSentEvent) -> Sequence[StreamEvent]:
        """The events one server-sent event gives. May raise
        :class:`StreamFailure`, or ``ValueError`` for undecodable data."""
        raise NotImplementedError

    def result(self) -> Done | Failed:
        """The final event once the stream has ended cleanly."""
        raise NotImplementedError

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """The events ``chunk`` completes; a failure found in it comes last."""
        if self.finished or self.ended:
            return []
        return self._read_all(self._decoder.feed(chunk))

    def close(self) -> list[StreamEvent]:
        """The events the end of the body completes, the final ``Done`` or ``Failed`` last."""
        if self.finished:
            return []
        out = [] if self.ended else self._read_all(self._decoder.finish())
        if not self.finished:
            try:
                result = self.result()
            except _MALFORMED as exc:  # fields of the wrong type, found only now
                result = self._undecodable(exc)
            self.finished = True
            out.append(result)
        return out

    def _read_all(self, events: Iterator[ServerSentEvent]) -> list[StreamEvent]:
        """What ``events`` give, up to the end marker or a failure (then last)."""
        out: list[StreamEvent] = []
        try:
            for sse in events:
                out.extend(self.read(sse))
                if self.ended:
                    break
        except StreamFailure as failure:
            out.append(self._fail(failure.failed))
        except _MALFORMED as exc:  # undecodable JSON or text, or JSON of the wrong shape
            out.append(self._fail(self._undecodable(exc)))
        return out

    def _fail(self, failed: Failed) -> Failed:
        self.finished = True
        return failed

    def _undecodable(self, exc: Exception) -> Failed:
        detail = str(exc) if isinstance(exc, ValueError) else f"unexpected shape: {_named(exc)}"
        return _errors.failure(
            self.vendor, "malformed", f"undecodable stream data: {detail}", self.secrets
        )


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what is left of a body for at most :data:`DRAIN_SECONDS`."""
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in chunks:
                pass
    except (TimeoutError, *_BROKEN):
        pass  # the reply is complete; only the connection is lost


def token_count(value: object) -> int:
    """A token count from a usage object; any other value is the server's
    mistake, raised as ``TypeError`` so the stream fails as malformed."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"a token count that is not an integer: {value!r:.40}")


def _named(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _cause(exc: BaseException) -> str:
    """The transport error under an SDK connection error, which says more."""
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause):
        return f"{type(cause).__name__}: {cause}"
    return str(exc)


__all__ = [
    "DRAIN_SECONDS",
    "SDKErrors",
    "SDKProvider",
    "StreamFailure",
    "StreamReader",
    "token_count",
]
