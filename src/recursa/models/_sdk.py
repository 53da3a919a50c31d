"""What the two SDK-backed providers share: the key, redaction, model info, and
the failures both SDKs raise alike.

The OpenAI and Anthropic SDKs are generated from one template, so their
exception trees have the same shape (a timeout is a connection error; a
response that does not validate has a ``message``). Where they differ is
data, an :class:`SDKErrors` naming each SDK's classes, not a subclass per
vendor. What is the vendor's own (the status errors' bodies, the stream's
events) stays in :mod:`recursa.models.openai` and :mod:`recursa.models.anthropic`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from recursa.config import Config, ProviderConfig
from recursa.errors import ModelUnavailable
from recursa.models import _errors, catalog
from recursa.models.types import Failed, ModelInfo


class _Client(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Client)


@dataclass(frozen=True, slots=True)
class SDKErrors:
    """One SDK's exception classes for the failures every SDK shares."""

    timeout: type[Exception]
    connection: type[Exception]
    validation: type[Exception]


class SDKProvider(Generic[C]):
    """The shared half of an SDK-backed provider over an SDK client ``C``; the
    vendor's class adds ``stream()`` and the translation of its status errors.

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
        self._client = client(
            api_key=key, base_url=table.base_url, timeout=table.timeout, max_retries=0
        )

    def info(self, model: str) -> ModelInfo:
        """Native tool calls; the context window from the catalog or the configuration."""
        ref = f"{self.name}/{model}"
        return ModelInfo(
            ref=ref,
            native_tools=True,
            context_window=catalog.context_window(ref, self._config.context_windows),
        )

    async def aclose(self) -> None:
        """Close the HTTP client and its pooled connections."""
        await self._client.close()

    def _shared_failure(self, exc: Exception, *, started: bool) -> Failed | None:
        """The failure for a timeout, a lost connection (``malformed`` once the
        response had ``started``: a cut-short reply) or an invalid response;
        None for the vendor's own errors."""
        name, secrets = self.name, self._secrets
        if isinstance(exc, self._errors.timeout):
            return _errors.failure(
                name, "timeout", f"no response within {self._timeout:g} s", secrets
            )
        if isinstance(exc, self._errors.connection):
            if started:
                return _errors.failure(name, "malformed", f"cut short: {_cause(exc)}", secrets)
            return _errors.failure(name, "network", _cause(exc), secrets)
        if isinstance(exc, self._errors.validation):
            return _errors.failure(name, "malformed", getattr(exc, "message", str(exc)), secrets)
        return None

    def _unknown_failure(self, exc: Exception) -> Failed:
        """The failure for an SDK error neither half recognises."""
        return _errors.failure(self.name, "unknown", f"{type(exc).__name__}: {exc}", self._secrets)

    def _undecodable(self, exc: ValueError) -> Failed:
        """The failure for stream data that is not the JSON or text it should be."""
        return _errors.failure(
            self.name, "malformed", f"undecodable stream data: {exc}", self._secrets
        )


def _cause(exc: BaseException) -> str:
    """The transport error under an SDK connection error, which says more."""
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause):
        return f"{type(cause).__name__}: {cause}"
    return str(exc)


__all__ = ["SDKErrors", "SDKProvider"]
