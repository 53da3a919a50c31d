"""Light model calls from a kernel: what ``llm()`` asks the runtime for.

A light call is one model request with no tools and no session of its own:
a prompt in, the reply's text out (the RLM paper's sub-call over a chunk of
a long context). It is made on behalf of the kernel's session, the
*caller*, and goes through the caller's gateway
(:meth:`recursa.runtime.accounts.Accounts.gateway`) like the caller's own
steps: admitted under the budgets of its subtree, retried, priced, and
settled at once. Its events go to the caller's log:

- ``model_retry`` for each retry;
- ``model_usage`` with ``kind="llm"`` and ``step=0`` (so the usage counts in
  the session's and the tree's totals, while the caller's context, which
  never saw the call, ignores it);
- one ``notice`` a person can read: the model, the heads of the prompt and
  the reply, the tokens.

Bounds, all checked before a request is made, each failing with one line:
the model is one the caller may use (the rules of ``rlm()``: an unknown
model is ``ModelUnavailable``); the reply cap is at most
:data:`MAX_REPLY_TOKENS`; the prompt, estimated at four characters a
token, must leave room in the model's window for at least
:data:`MIN_REPLY_TOKENS` of reply (the reply cap shrinks to what is left).
A prompt the provider still finds too long gets the same error. The
caller's ``[limits] max_tokens`` (``--max-tokens``) holds for its turn's
tokens, its steps' and its light calls' together: a call is refused once the
turn has used them, and its reply cap is cut to what is left.

At most ``[agents] llm_concurrency`` calls of one session are in flight at
once; the others wait for a place. The embedded llama.cpp model is one
object per process whose generations hold its lock from the first prompt
token to the last reply token (:mod:`recursa.models.local.engine`), so on
``local/...`` the calls run one at a time whatever the concurrency: a
session's local calls get one place, so the waiting ones hold no worker
thread and reserve no budget before their turn.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from recursa.errors import ProviderError, UsageError, one_line
from recursa.models.registry import parse_ref
from recursa.models.types import Done, Failed, Request, UserMessage
from recursa.protocol.calls import Refused
from recursa.protocol.events import Event, ModelUsage, Notice
from recursa.protocol.kernel_ops import LlmCall, LlmReply
from recursa.store import history

if TYPE_CHECKING:
    from recursa.runtime.runtime import Runtime

LOCAL = "local"
"""The provider of the embedded llama.cpp models."""
DEFAULT_SYSTEM = "You are a helpful assistant. Answer the request directly and concisely."
"""The system prompt of a call that names none."""
DEFAULT_REPLY_TOKENS = 1024
"""A reply's cap when the call names none."""
MAX_REPLY_TOKENS = 16_384
"""The largest reply cap a call may ask for."""
MIN_REPLY_TOKENS = 16
"""The least reply room a prompt must leave in the model's window."""
CHARS_PER_TOKEN = 4
"""How a prompt's tokens are estimated before the call (the provider counts them exactly)."""
HEAD_CHARS = 80
"""How much of the prompt and the reply the transcript's notice shows."""


class LightCalls:
    """``llm()`` for the runtime's sessions; see the module docstring."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._places: dict[tuple[str, bool], asyncio.Semaphore] = {}

    async def call(self, caller: str, request: LlmCall) -> LlmReply:
        """One light call for ``caller``; its reply. Raises ``UsageError`` for a
        call that cannot fit, ``ModelUnavailable`` for a model that cannot be
        used, and ``ProviderError`` for a call that failed or that a spent
        budget refused (the message says which)."""
        runtime = self.runtime
        model = request.model or runtime.store.session(caller).model
        info = runtime.providers.info(model)
        system = request.system if request.system and request.system.strip() else DEFAULT_SYSTEM
        cap = reply_cap(request.max_tokens, request.prompt, system, info.context_window, model)
        session = runtime.get(caller)
        limit = session.deps.limits.max_tokens
        if limit is not None:
            used = history.turn_tokens(runtime.store, caller)
            if used >= limit:
                raise ProviderError(
                    "aborted",
                    f"llm(): the call was refused: this turn used {used:,} tokens, over the "
                    f"limit of {limit:,} (--max-tokens)",
                )
            cap = min(cap, limit - used)
        gateway = runtime.accounts.gateway(caller, model)

        def record(event: Event) -> object:
            if isinstance(event, ModelUsage):
                event = ModelUsage(
                    model=event.model,
                    input_tokens=event.input_tokens,
                    output_tokens=event.output_tokens,
                    cached_tokens=event.cached_tokens,
                    cache_write_tokens=event.cache_write_tokens,
                    estimated=event.estimated,
                    cost=event.cost,
                    latency=event.latency,
                    step=0,
                    kind="llm",
                )
            return session.record(event)

        call = Request(
            model=gateway.model_name,
            system=system,
            messages=(UserMessage(request.prompt),),
            max_output_tokens=cap,
        )
        async with self._place(caller, local=parse_ref(model).provider == LOCAL):
            ended = await gateway.complete(call, record)
        match ended.outcome:
            case Done(message=message, stop_reason=stop):
                usage = ended.usage
                reply = LlmReply(
                    text=message.text,
                    model=model,
                    input_tokens=usage.input_tokens if usage else 0,
                    output_tokens=usage.output_tokens if usage else 0,
                    cost=usage.cost if usage else None,
                    cut_off=stop == "max_tokens",
                )
                session.record(Notice(level="info", text=transcript_line(request.prompt, reply)))
                return reply
            case Failed(kind="context_overflow", message=text):
                raise UsageError(
                    f"llm(): the prompt does not fit {model}'s context window: "
                    f"{one_line(text, limit=200)}; split it into smaller prompts"
                )
            case Failed(kind=kind, message=text, status=status):
                raise ProviderError(
                    kind, f"llm(): the call to {model} failed: {one_line(text)}", status=status
                )
            case Refused(detail=detail):
                raise ProviderError("aborted", f"llm(): the call was refused: {detail}")

    def _place(self, caller: str, *, local: bool) -> asyncio.Semaphore:
        """The caller's places for calls in flight (one for the embedded model)."""
        key = (caller, local)
        place = self._places.get(key)
        if place is None:
            place = asyncio.Semaphore(1 if local else self.runtime.config.agents.llm_concurrency)
            self._places[key] = place
        return place


def reply_cap(wanted: int | None, prompt: str, system: str, window: int | None, model: str) -> int:
    """The reply cap of a call: ``wanted`` (or the default), at most
    :data:`MAX_REPLY_TOKENS` and at most what the window leaves after the
    prompt. UsageError, one line, when the prompt leaves too little."""
    if wanted is not None and wanted > MAX_REPLY_TOKENS:
        raise UsageError(f"llm(): max_tokens is at most {MAX_REPLY_TOKENS:,}, not {wanted:,}")
    cap = wanted or DEFAULT_REPLY_TOKENS
    if window is None:
        return cap
    prompt_tokens = -(-(len(prompt) + len(system)) // CHARS_PER_TOKEN)
    room = window - prompt_tokens
    if room < MIN_REPLY_TOKENS:
        raise UsageError(
            f"llm(): the prompt ({len(prompt):,} characters, about {prompt_tokens:,} tokens) "
            f"does not fit {model}'s context window of {window:,} tokens; "
            "split it into smaller prompts (llm.batch over chunks)"
        )
    return min(cap, room)


def transcript_line(prompt: str, reply: LlmReply) -> str:
    """The notice a light call leaves in the caller's transcript."""
    cost = f", ${reply.cost:.4f}" if reply.cost is not None else ""
    cut = " (cut off at its cap)" if reply.cut_off else ""
    return (
        f"llm() {reply.model}: {head(prompt)!r} -> {head(reply.text)!r}{cut} "
        f"[{reply.input_tokens:,} in, {reply.output_tokens:,} out{cost}]"
    )


def head(text: str) -> str:
    """The first :data:`HEAD_CHARS` of ``text`` on one line."""
    return one_line(text, limit=HEAD_CHARS)


__all__ = [
    "DEFAULT_REPLY_TOKENS",
    "DEFAULT_SYSTEM",
    "MAX_REPLY_TOKENS",
    "LightCalls",
    "reply_cap",
    "transcript_line",
]
