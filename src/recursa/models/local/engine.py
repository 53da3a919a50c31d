"""The llama.cpp side of the local provider: loaded models and one blocking generation.

Everything here is synchronous and runs in worker threads; the provider
bridges it to the event loop.

Invariants:

- One :class:`LoadedModel` per :class:`ModelSpec` (file, context size, threads)
  per process, loaded on first use and kept until :func:`unload_models`.
  Loading the same spec from two threads loads it once.
- A ``Llama`` object holds one KV cache and is not thread-safe: everything
  that evaluates or samples runs while holding :attr:`LoadedModel.lock`, so
  generations on one model are serialized. Tokenizing only reads the
  vocabulary and may run outside the lock.
- The KV cache is kept between calls. :func:`generate` keeps the longest
  common token prefix of the cached tokens and the new prompt and evaluates
  only the rest, in chunks of :data:`EVAL_CHUNK` tokens; it checks the
  cancel flag between chunks and after every generated token, so a cancelled
  call lets go of the lock within one chunk or one token.
"""

from __future__ import annotations

import atexit
import codecs
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from recursa.models.local.chat import CHATML_STOPS, Piece, Special, render_chatml, render_template
from recursa.models.types import Message, StopReason

TemplateKind = Literal["chatml", "jinja"]

EVAL_CHUNK = 128
"""Prompt tokens evaluated between two looks at the cancel flag. Measured on
2 cores with the 1.5B model: 128-token batches run as fast as 512-token ones
(about 160 tok/s on a quiet machine), so a cancel waits under a second."""

_LOCK_POLL = 0.05
"""Seconds between looks at the cancel flag while waiting for a busy model."""

_EXIT_WAIT = 5.0
"""Seconds the interpreter waits at exit for a cancelled generation to let go of its model."""


class ContextOverflow(Exception):
    """The prompt does not fit the loaded context."""

    def __init__(self, prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(
            f"the prompt has {prompt_tokens} tokens and the local context holds {n_ctx} "
            "(compact the conversation, or raise [local] n_ctx)"
        )
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What to load and how to prompt it. Hashable: the key of the model cache."""

    path: Path
    n_ctx: int
    threads: int
    template_kind: TemplateKind = "chatml"
    default_system: str | None = None
    template: str | None = None
    """The model's own Jinja template, used when ``template_kind`` is ``jinja``."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of one :func:`generate`. ``aborted`` means the cancel flag stopped it."""

    text: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    stop_reason: StopReason
    aborted: bool
    prompt_seconds: float
    decode_seconds: float


class LoadedModel:
    """One llama.cpp model in memory with its KV cache.

    Evaluate or sample only while holding :attr:`lock`; :meth:`prompt_tokens`
    and :meth:`tokenize` may be called without it.
    """

    def __init__(
        self,
        spec: ModelSpec,
        llm: Any,
        load_seconds: float = 0.0,
        *,
        is_eog: Callable[[int], bool] | None = None,
        partial_kv: bool | None = None,
    ) -> None:
        """Wrap a loaded ``llama_cpp.Llama``. ``is_eog`` (is a token end-of-generation?)
        and ``partial_kv`` (can the KV cache be cut after a prefix?) are read from
        llama.cpp unless given; tests pass them with a fake ``llm``."""
        self.spec = spec
        self.llm = llm
        self.lock = threading.Lock()
        self.load_seconds = load_seconds
        self.n_ctx: int = int(llm.n_ctx())
        if is_eog is None or partial_kv is None:
            import llama_cpp

            vocab = llama_cpp.llama_model_get_vocab(llm.model)
            if is_eog is None:
                is_eog = lambda token: bool(llama_cpp.llama_vocab_is_eog(vocab, token))  # noqa: E731
            if partial_kv is None:
                recurrent = llama_cpp.llama_model_is_recurrent(llm.model)
                partial_kv = not (recurrent or llama_cpp.llama_model_is_hybrid(llm.model))
        self._is_eog: Callable[[int], bool] = is_eog
        self._partial_kv: bool = partial_kv
        self._specials: dict[str, int] = {}
        self.stop_tokens: frozenset[int] = frozenset(
            token for text in CHATML_STOPS if (token := self._special_id(text)) is not None
        )

    def is_end(self, token: int) -> bool:
        """Whether ``token`` ends the assistant turn (end-of-generation or a ChatML control token)."""
        return token in self.stop_tokens or self._is_eog(token)

    def prompt_tokens(self, system: str, messages: Sequence[Message]) -> list[int]:
        """Render and tokenize a conversation with the model's template."""
        if self.spec.template_kind == "jinja" and self.spec.template:
            text = render_template(
                self.spec.template,
                system or self.spec.default_system or "",
                messages,
                bos_token=self._piece(self.llm.token_bos()),
                eos_token=self._piece(self.llm.token_eos()),
            )
            return list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))
        return self.tokenize(
            render_chatml(system, messages, default_system=self.spec.default_system)
        )

    def tokenize(self, pieces: Sequence[Piece]) -> list[int]:
        """Text pieces with special-token parsing off; each :class:`Special` as its one token."""
        tokens: list[int] = []
        for piece in pieces:
            if isinstance(piece, Special):
                token = self._special_id(piece.text)
                if token is None:
                    raise ValueError(f"{self.spec.path.name} has no control token {piece.text}")
                tokens.append(token)
            else:
                tokens.extend(
                    self.llm.tokenize(piece.encode("utf-8"), add_bos=False, special=False)
                )
        return tokens

    def _special_id(self, text: str) -> int | None:
        if text not in self._specials:
            found = self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
            if len(found) != 1:
                return None
            self._specials[text] = int(found[0])
        return self._specials[text]

    def _piece(self, token: int) -> str:
        if token < 0:
            return ""
        data: bytes = self.llm.detokenize([token], special=True)
        return data.decode("utf-8", errors="replace")

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the cached tokens shared with ``tokens`` and return how many were kept.

        At least one prompt token is always left to evaluate, so the logits the
        first sample reads belong to this prompt.
        """
        llm = self.llm
        cached = list(llm.input_ids[: llm.n_tokens]) if self._partial_kv else []
        common = 0
        for old, new in zip(cached, tokens, strict=False):
            if old != new:
                break
            common += 1
        keep = min(common, len(tokens) - 1)
        if keep <= 0:
            llm.reset()
            return 0
        llm.n_tokens = keep  # the next eval drops every cached entry after this position
        return keep


_MODELS: dict[ModelSpec, LoadedModel] = {}
_LOADING: dict[ModelSpec, threading.Lock] = {}
_REGISTRY_LOCK = threading.Lock()
_LIVE: set[threading.Event] = set()


def load_model(spec: ModelSpec) -> LoadedModel:
    """The process-wide model for ``spec``, loading it on first use (blocking: call from a thread).

    Raises whatever llama.cpp raises for a file it cannot load (a ``ValueError``).
    """
    with _REGISTRY_LOCK:
        found = _MODELS.get(spec)
        if found is not None:
            return found
        loading = _LOADING.setdefault(spec, threading.Lock())
    with loading:
        with _REGISTRY_LOCK:
            found = _MODELS.get(spec)
        if found is not None:
            return found
        from llama_cpp import Llama

        started = time.monotonic()
        llm = Llama(
            model_path=str(spec.path),
            n_ctx=spec.n_ctx,
            n_threads=spec.threads,
            n_threads_batch=spec.threads,
            verbose=False,
        )
        model = LoadedModel(spec, llm, time.monotonic() - started)
        with _REGISTRY_LOCK:
            _MODELS[spec] = model
        return model


def loaded_models() -> list[LoadedModel]:
    """The models this process holds, in load order."""
    with _REGISTRY_LOCK:
        return list(_MODELS.values())


def unload_models() -> None:
    """Forget every loaded model; each is freed once no running generation uses it."""
    with _REGISTRY_LOCK:
        _MODELS.clear()
        _LOADING.clear()


def generate(
    model: LoadedModel,
    tokens: Sequence[int],
    *,
    max_tokens: int,
    temperature: float,
    stop: Sequence[str],
    cancel: threading.Event,
    on_text: Callable[[str], None],
) -> Outcome:
    """Run one completion of ``tokens`` on ``model``; blocking.

    Waits for the model's lock (giving up when ``cancel`` is set), reuses the
    cached prefix, evaluates the rest of the prompt, then samples until an
    end token, a ``stop`` string (cut from the text), ``max_tokens`` or the end
    of the context. ``on_text`` receives the reply in order, never a part of
    a stop string. Raises :class:`ContextOverflow` when the prompt leaves no
    room for a single token; llama.cpp errors propagate.
    """
    _LIVE.add(cancel)
    try:
        while not model.lock.acquire(timeout=_LOCK_POLL):
            if cancel.is_set():
                return Outcome("", len(tokens), 0, 0, "other", True, 0.0, 0.0)
        try:
            return _generate_locked(
                model, list(tokens), max_tokens, temperature, stop, cancel, on_text
            )
        finally:
            model.lock.release()
    finally:
        _LIVE.discard(cancel)


def _generate_locked(
    model: LoadedModel,
    tokens: list[int],
    max_tokens: int,
    temperature: float,
    stop: Sequence[str],
    cancel: threading.Event,
    on_text: Callable[[str], None],
) -> Outcome:
    llm = model.llm
    if len(tokens) >= model.n_ctx:
        raise ContextOverflow(len(tokens), model.n_ctx)
    started = time.monotonic()
    cached = model.reuse_prefix(tokens)

    def outcome(
        text: str, produced: int, reason: StopReason, aborted: bool, decode_start: float
    ) -> Outcome:
        now = time.monotonic()
        return Outcome(
            text,
            len(tokens),
            cached,
            produced,
            reason,
            aborted,
            decode_start - started,
            now - decode_start,
        )

    for start in range(cached, len(tokens), EVAL_CHUNK):
        if cancel.is_set():
            return outcome("", 0, "other", True, time.monotonic())
        llm.eval(tokens[start : start + EVAL_CHUNK])
    decode_start = time.monotonic()

    budget = min(max_tokens, model.n_ctx - len(tokens))
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = ""
    emitted = 0
    produced = 0
    reason: StopReason = "max_tokens"
    # The prompt is evaluated in full, so generate() samples at once without re-evaluating it.
    sampler = llm.generate(
        tokens, temp=temperature, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0
    )
    try:
        for token in sampler:
            if cancel.is_set():
                return outcome(text[:emitted], produced, "other", True, decode_start)
            if model.is_end(token):
                reason = "end"
                break
            produced += 1
            text += decoder.decode(llm.detokenize([token]))
            cut = _find_stop(text, stop, emitted)
            if cut is not None:
                text = text[:cut]
                reason = "stop_sequence"
                break
            safe = len(text) - _held_back(text, stop)
            if safe > emitted:
                on_text(text[emitted:safe])
                emitted = safe
            if produced >= budget:
                break
    finally:
        sampler.close()
    if reason != "stop_sequence":
        text += decoder.decode(b"", final=True)
    if len(text) > emitted:
        on_text(text[emitted:])
    return outcome(text, produced, reason, False, decode_start)


def _find_stop(text: str, stops: Sequence[str], emitted: int) -> int | None:
    """Where the first complete stop string starts, looking only where one can newly appear."""
    best: int | None = None
    for stop in stops:
        if not stop:
            continue
        found = text.find(stop, max(0, emitted - len(stop) + 1))
        if found >= 0 and (best is None or found < best):
            best = found
    return best


def _held_back(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters could still grow into a stop string."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


@atexit.register
def _cancel_live_generations() -> None:
    """At interpreter exit, stop worker threads before llama.cpp objects are torn down:
    set every cancel flag, then wait (bounded) until each model's lock is free."""
    for event in list(_LIVE):
        event.set()
    for model in loaded_models():
        if model.lock.acquire(timeout=_EXIT_WAIT):
            model.lock.release()


__all__ = [
    "EVAL_CHUNK",
    "ContextOverflow",
    "LoadedModel",
    "ModelSpec",
    "Outcome",
    "TemplateKind",
    "generate",
    "load_model",
    "loaded_models",
    "unload_models",
]
