"""The faux provider: scripted replies, registered like any other provider.

Tests and SDK users script a model by name, then refer to it as ``faux/NAME``::

    from recursa.models.faux import code, reply, register_script

    script = register_script("demo", [code("x = 6 * 7"), code("print(x)"), reply("42")])
    # ... run a session with model "faux/demo" ...
    assert "x = 6 * 7" in str(script.requests[1].messages)

A step is a :class:`FauxReply`, a :class:`FauxFault`, or a function of the
:class:`~recursa.models.types.Request` returning one (for replies that depend on
what the model was shown). ``code()`` becomes a native ``python`` tool call, or
a fenced ```python block when the script is registered with
``native_tools=False`` (the protocol the embedded models use). When a script
runs out it answers ``"(faux script exhausted)"``, which tests notice.

``faux/echo`` is built in: it answers with the text of the last user message.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from recursa.config import Config
from recursa.errors import FailureKind, ModelUnavailable
from recursa.models.types import (
    AssistantMessage,
    Done,
    Failed,
    ModelInfo,
    Request,
    StopReason,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Usage,
    UserMessage,
)

EXHAUSTED = "(faux script exhausted)"


@dataclass(frozen=True, slots=True)
class FauxReply:
    """A scripted reply: text, and code to run (one tool call per entry)."""

    text: str = ""
    code: tuple[str, ...] = ()
    raw_tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    stop_reason: StopReason | None = None
    """Defaults to ``tool_calls`` or ``end``; ``max_tokens`` simulates a cut-off reply."""


@dataclass(frozen=True, slots=True)
class FauxFault:
    """A scripted failure: the stream ends with ``Failed(kind)`` after ``partial`` text."""

    kind: FailureKind
    message: str = "scripted failure"
    partial: str = ""
    retry_after: float | None = None


FauxStep = FauxReply | FauxFault | Callable[[Request], "FauxReply | FauxFault"]


def reply(
    text: str, *, usage: Usage | None = None, stop_reason: StopReason | None = None
) -> FauxReply:
    return FauxReply(text=text, usage=usage, stop_reason=stop_reason)


def code(*sources: str, text: str = "", usage: Usage | None = None) -> FauxReply:
    """A reply that runs ``sources`` as cells (several = several tool calls in one reply)."""
    return FauxReply(text=text, code=tuple(sources), usage=usage)


def tool_call(name: str, arguments: str, *, text: str = "") -> FauxReply:
    """A reply with a raw tool call, for testing malformed arguments or unknown tools."""
    return FauxReply(
        text=text, raw_tool_calls=(ToolCall(id="call_raw", name=name, arguments=arguments),)
    )


def fault(
    kind: FailureKind, message: str = "scripted failure", **kw: str | float | None
) -> FauxFault:
    return FauxFault(kind=kind, message=message, **kw)  # type: ignore[arg-type]


@dataclass
class FauxScript:
    """A named script. ``requests`` records every request it answered, in order."""

    name: str
    steps: list[FauxStep]
    native_tools: bool = True
    context_window: int | None = None
    delay: float = 0.0
    fallback: FauxStep = FauxReply(text=EXHAUSTED)
    requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def next(self, request: Request) -> FauxReply | FauxFault:
        with self._lock:
            self.requests.append(request)
            step: FauxStep = self.steps.pop(0) if self.steps else self.fallback
        if callable(step):
            return step(request)
        return step

    @property
    def remaining(self) -> int:
        return len(self.steps)


def per_session(*steps: FauxStep) -> Callable[[Request], FauxReply | FauxFault]:
    """A responder that plays ``steps`` separately for each session calling it
    (sessions are told apart by ``request.cache_key``), e.g. for sub-agents that
    share a model: ``register_script("kid", [], fallback=per_session(code(...), reply(...)))``.
    A session past the last step gets the "exhausted" reply."""
    lock = threading.Lock()
    position: dict[str | None, int] = {}

    def respond(request: Request) -> FauxReply | FauxFault:
        with lock:
            index = position.get(request.cache_key, 0)
            position[request.cache_key] = index + 1
        if index >= len(steps):
            return FauxReply(text=EXHAUSTED)
        step = steps[index]
        return step(request) if callable(step) else step

    return respond


_SCRIPTS: dict[str, FauxScript] = {}


def register_script(
    name: str,
    steps: Sequence[FauxStep],
    *,
    native_tools: bool = True,
    context_window: int | None = None,
    delay: float = 0.0,
    fallback: FauxStep | None = None,
) -> FauxScript:
    """Register (or replace) the script answering ``faux/NAME``.

    ``delay`` seconds pass before each reply streams, to simulate a model's
    latency. ``fallback`` answers once the steps are used up (default: the
    "exhausted" reply); a function of the request makes a responder that can
    serve many sessions at once (``request.cache_key`` is the session id).
    """
    script = FauxScript(name, list(steps), native_tools, context_window, delay)
    if fallback is not None:
        script.fallback = fallback
    _SCRIPTS[name] = script
    return script


def _echo(request: Request) -> FauxReply:
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            return FauxReply(text=message.text)
    return FauxReply(text="")


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


class FauxProvider:
    """Serves every ``faux/NAME`` reference from the registered scripts."""

    name = "faux"

    def __init__(self, config: Config | None = None) -> None:
        self._calls = 0

    def _script(self, model: str) -> FauxScript:
        script = _SCRIPTS.get(model)
        if script is None and model == "echo":
            script = _SCRIPTS["echo"] = FauxScript("echo", [], fallback=_echo)
        if script is None:
            raise ModelUnavailable(
                f"no faux script named {model!r} (register one with recursa.testing.faux)"
            )
        return script

    def info(self, model: str) -> ModelInfo:
        script = self._script(model)
        return ModelInfo(
            ref=f"faux/{model}",
            native_tools=script.native_tools,
            context_window=script.context_window,
        )

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        script = self._script(request.model)
        step = script.next(request)
        if script.delay:
            await asyncio.sleep(script.delay)
        self._calls += 1
        if isinstance(step, FauxFault):
            if step.partial:
                yield TextDelta(step.partial)
            yield Failed(
                kind=step.kind, message=f"faux: {step.message}", retry_after=step.retry_after
            )
            return
        text, calls = _render(step, script.native_tools, self._calls)
        for piece in _pieces(text):
            yield TextDelta(piece)
        for index, call in enumerate(calls):
            args = call.arguments
            cut = max(1, len(args) // 2)
            yield ToolCallDelta(index=index, arguments=args[:cut], id=call.id, name=call.name)
            yield ToolCallDelta(index=index, arguments=args[cut:])
        usage = step.usage or Usage(
            input_tokens=sum(_estimate_tokens(_message_text(m)) for m in request.messages)
            + _estimate_tokens(request.system),
            output_tokens=_estimate_tokens(text + "".join(c.arguments for c in calls)),
        )
        message = AssistantMessage(text=text, tool_calls=calls)
        stop = step.stop_reason or ("tool_calls" if calls else "end")
        yield Done(message=message, usage=usage, stop_reason=stop)

    async def aclose(self) -> None:
        return None


def _render(step: FauxReply, native: bool, call_no: int) -> tuple[str, tuple[ToolCall, ...]]:
    if native:
        calls = tuple(
            ToolCall(id=f"call_{call_no}_{i}", name="python", arguments=json.dumps({"code": src}))
            for i, src in enumerate(step.code)
        )
        return step.text, calls + step.raw_tool_calls
    blocks = "".join(f"```python\n{src}\n```\n" for src in step.code)
    text = f"{step.text}\n{blocks}" if step.text and blocks else step.text or blocks
    return text.rstrip("\n"), step.raw_tool_calls


def _pieces(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _message_text(message: UserMessage | AssistantMessage | ToolResult) -> str:
    if isinstance(message, AssistantMessage):
        return message.text + "".join(c.arguments for c in message.tool_calls)
    return message.text


__all__ = [
    "EXHAUSTED",
    "FauxFault",
    "FauxProvider",
    "FauxReply",
    "FauxScript",
    "FauxStep",
    "code",
    "fault",
    "per_session",
    "register_script",
    "reply",
    "tool_call",
]
