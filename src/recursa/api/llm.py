"""``llm``: light model calls from inside a kernel.

``await llm(prompt)`` is one model call with no tools: the prompt in, the
reply's text out. It is not a session (no kernel, no turns, no history of
its own): use it to ask a model about a piece of text, e.g. one chunk of a
long input at a time; use ``rlm()`` when the work needs its own kernel and
turns. The daemon makes the call on this session's behalf, so it counts in
this session's (and its tree's) usage and budgets and shows in its
transcript (:mod:`recursa.runtime.light_calls`).

Arguments are checked here, before any request: a wrong type is a
TypeError, a bad value a ValueError, each one line. What the daemon refuses
(a prompt too long for the model's window, an unknown model, a spent
budget) comes back as the matching :class:`~recursa.errors.RecursaError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from recursa.api import client
from recursa.api.client import optional_text_arg as _option
from recursa.api.client import text_arg as _text
from recursa.errors import RecursaError, one_line

MAX_BATCH = 1000
"""Prompts in one ``llm.batch``."""
MAX_CONCURRENCY = 64
"""Calls one ``llm.batch`` keeps in flight; the daemon's ``[agents] llm_concurrency`` bounds it too."""
DEFAULT_CONCURRENCY = 4
MAX_TOKENS = 16_384
"""The largest ``max_tokens`` (the daemon's own bound)."""


class LlmBatchError(RecursaError):
    """Raised by ``llm.batch`` when some prompts failed, once every prompt has
    been tried. ``results`` holds every reply in order, None where the prompt
    failed; ``errors`` maps each failed prompt's index to its one-line error."""

    def __init__(self, message: str, results: list[str | None], errors: dict[int, str]) -> None:
        super().__init__(message)
        self.results = results
        self.errors = errors


class Llm:
    """Light model calls: one prompt in, the reply's text out (no tools, no session).

    ``text = await llm(prompt, model=None, system=None, max_tokens=None)``
        ``model``: default yours (any model ``rlm()`` accepts); ``system``: a
        system prompt; ``max_tokens``: the reply's cap (default 1024, at most
        16384). A prompt too long for the model's window is an error: split it.
    ``texts = await llm.batch(prompts, concurrency=4, model=None, system=None, max_tokens=None)``
        The replies, in the order of ``prompts`` (at most 1000), with at most
        ``concurrency`` calls in flight. If any prompt fails, ``llm.BatchError``
        is raised once all were tried: its ``results`` keeps the replies (None
        where one failed), its ``errors`` the failures by index.
    Each call counts in your usage and budgets and shows in your transcript.
    Example over a long text: ``parts = [context[i:i + 8000] for i in
    range(0, len(context), 8000)]``, then
    ``answers = await llm.batch([f"Find X in:\\n{p}" for p in parts])``.
    On the embedded local model the calls run one at a time.
    """

    BatchError = LlmBatchError
    """What ``llm.batch`` raises when some prompts failed: ``except llm.BatchError as e``."""

    async def __call__(
        self,
        prompt: str,
        model: str | None = None,
        system: str | None = None,
        max_tokens: int | None = None,
    ) -> str:
        """One model call on ``prompt``; the reply's text."""
        __tracebackhide__ = True
        body = call_body(prompt, model, system, max_tokens, "prompt")
        return await _ask(body, "llm()")

    async def batch(
        self,
        prompts: Iterable[str],
        concurrency: int = DEFAULT_CONCURRENCY,
        model: str | None = None,
        system: str | None = None,
        max_tokens: int | None = None,
    ) -> list[str]:
        """One call per prompt, at most ``concurrency`` at once; the replies in order."""
        __tracebackhide__ = True
        items = check_prompts(prompts)
        width = check_concurrency(concurrency)
        bodies = [
            call_body(prompt, model, system, max_tokens, f"prompts[{index}]")
            for index, prompt in enumerate(items)
        ]
        results: list[str | None] = [None] * len(bodies)
        errors: dict[int, str] = {}
        place = asyncio.Semaphore(width)

        async def one(index: int) -> None:
            async with place:
                try:
                    results[index] = await _ask(bodies[index], "llm.batch()")
                except RecursaError as exc:
                    errors[index] = one_line(exc, typed=True, limit=300)

        await asyncio.gather(*(one(index) for index in range(len(bodies))))
        if errors:
            first = min(errors)
            raise LlmBatchError(
                f"llm.batch(): {len(errors)} of {len(bodies)} prompts failed "
                f"(prompts[{first}]: {errors[first]}); the replies are in the error's "
                ".results (None where a prompt failed)",
                results,
                errors,
            )
        return [text for text in results if text is not None]

    def __repr__(self) -> str:
        return (
            "<llm: text = await llm(prompt, model=None, system=None, max_tokens=None); "
            "texts = await llm.batch(prompts, concurrency=4); help(llm)>"
        )


async def _ask(body: dict[str, Any], what: str) -> str:
    __tracebackhide__ = True
    from recursa.protocol.kernel_ops import LlmReply

    data = await client.run("llm", body, what=what)
    return client.decode(LlmReply, data, what).text


def call_body(
    prompt: object, model: object, system: object, max_tokens: object, name: str
) -> dict[str, Any]:
    """The request of one call, its arguments checked (TypeError or ValueError, one line)."""
    return {
        "prompt": _text(prompt, name),
        "model": _option(model, "model"),
        "system": _system(system),
        "max_tokens": check_max_tokens(max_tokens),
    }


def check_prompts(prompts: object) -> list[str]:
    """The prompts of a batch as a list: an iterable of at most :data:`MAX_BATCH`
    items (a lone str is refused: it is a prompt, not a list of them)."""
    if isinstance(prompts, str | bytes) or not isinstance(prompts, Iterable):
        raise TypeError(f"prompts must be a list of str, not {type(prompts).__name__}")
    items: list[Any] = []
    for item in prompts:
        items.append(item)
        if len(items) > MAX_BATCH:
            raise ValueError(f"llm.batch takes at most {MAX_BATCH} prompts; split the list")
    return items


def check_concurrency(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"concurrency must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be from 1 to {MAX_CONCURRENCY}, not {value}")
    return value


def check_max_tokens(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_tokens must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_TOKENS:
        raise ValueError(f"max_tokens must be from 1 to {MAX_TOKENS}, not {value}")
    return value


def _system(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"system must be a str, not {type(value).__name__}")
    return value


llm = Llm()

__all__ = [
    "MAX_BATCH",
    "MAX_CONCURRENCY",
    "Llm",
    "LlmBatchError",
    "call_body",
    "check_concurrency",
    "check_max_tokens",
    "check_prompts",
    "llm",
]
