"""The local generation loop against a scripted stand-in for ``llama_cpp.Llama``.

The fake tokenizes one character per token, records every batch it
evaluates, and samples a scripted reply, evaluating each sampled token before
the next sample as llama.cpp does. That makes the prefix reuse, chunking,
stop strings and cancellation observable without a model.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from recursa.models.local.engine import (
    EVAL_CHUNK,
    ContextOverflow,
    LoadedModel,
    ModelSpec,
    Outcome,
    generate,
)
from recursa.models.types import AssistantMessage, ToolResult, UserMessage

SPECIALS = {"<|im_start|>": 1001, "<|im_end|>": 1002, "<|endoftext|>": 1003}
EOG = 1002
BYTE = 2000
"""Token ``BYTE + b`` stands for the single byte ``b`` (for split UTF-8 characters)."""


class FakeLlama:
    def __init__(self, reply: Sequence[int] = (), n_ctx: int = 4096) -> None:
        self.reply = list(reply)
        self._n_ctx = n_ctx
        self.input_ids: list[int] = [0] * n_ctx
        self.n_tokens = 0
        self.batches: list[list[int]] = []
        self.on_eval: list[threading.Event] = []

    def n_ctx(self) -> int:
        return self._n_ctx

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        decoded = text.decode()
        if special and decoded in SPECIALS:
            return [SPECIALS[decoded]]
        return [ord(ch) for ch in decoded]

    def detokenize(self, tokens: list[int], special: bool = False) -> bytes:
        out = b""
        for token in tokens:
            if token >= BYTE:
                out += bytes([token - BYTE])
            elif token < 1000:
                out += chr(token).encode()
        return out

    def token_bos(self) -> int:
        return -1

    def token_eos(self) -> int:
        return EOG

    def reset(self) -> None:
        self.n_tokens = 0

    def eval(self, tokens: Sequence[int]) -> None:
        assert self.n_tokens + len(tokens) <= self._n_ctx, "evaluated past the context"
        self.input_ids[self.n_tokens : self.n_tokens + len(tokens)] = list(tokens)
        self.n_tokens += len(tokens)
        self.batches.append(list(tokens))
        for event in self.on_eval:
            event.set()

    def generate(self, tokens: Sequence[int], **_sampling: object) -> Iterator[int]:
        assert self.n_tokens == len(tokens), "the prompt must be fully evaluated before sampling"
        assert self.input_ids[: self.n_tokens] == list(tokens)
        for token in self.reply:
            yield token
            self.eval([token])

    @property
    def evaluated(self) -> int:
        return sum(len(batch) for batch in self.batches)


def _model(llm: FakeLlama) -> LoadedModel:
    spec = ModelSpec(
        path=Path("fake.gguf"), n_ctx=llm.n_ctx(), threads=1, default_system="be brief"
    )
    return LoadedModel(spec, llm, is_eog=lambda token: token == EOG, partial_kv=True)


def _chars(text: str) -> list[int]:
    return [ord(ch) for ch in text]


def _run(model: LoadedModel, prompt: Sequence[int], **options: object) -> tuple[Outcome, list[str]]:
    deltas: list[str] = []
    settings: dict[str, object] = {"max_tokens": 100, "temperature": 0.0, "stop": ()}
    settings.update(options)
    cancel = settings.pop("cancel", threading.Event())
    assert isinstance(cancel, threading.Event)
    outcome = generate(model, prompt, cancel=cancel, on_text=deltas.append, **settings)  # type: ignore[arg-type]
    return outcome, deltas


def test_a_reply_streams_until_the_end_token() -> None:
    llm = FakeLlama([*_chars("hello"), EOG])
    model = _model(llm)
    prompt = _chars("x" * (EVAL_CHUNK * 2 + 5))

    outcome, deltas = _run(model, prompt)

    assert "".join(deltas) == outcome.text == "hello"
    assert (outcome.prompt_tokens, outcome.cached_tokens, outcome.output_tokens) == (
        len(prompt),
        0,
        5,
    )
    assert outcome.stop_reason == "end"
    assert not outcome.aborted
    assert [len(b) for b in llm.batches[:3]] == [EVAL_CHUNK, EVAL_CHUNK, 5]
    assert not model.lock.locked()


def test_a_prompt_that_extends_the_last_call_evaluates_only_new_tokens() -> None:
    llm = FakeLlama([*_chars("ok"), EOG])
    model = _model(llm)
    first = _chars("system and user turn")
    _run(model, first)
    second = first + _chars("ok") + _chars(" then the next user turn")
    before = llm.evaluated

    outcome, _ = _run(model, second)

    assert outcome.cached_tokens == len(first) + 2
    prompt_evaluated = llm.batches[-3]  # then one batch per reply token
    assert prompt_evaluated == _chars(" then the next user turn")
    assert llm.evaluated - before == len(second) - outcome.cached_tokens + 2


def test_an_identical_prompt_re_evaluates_one_token() -> None:
    llm = FakeLlama([EOG])
    model = _model(llm)
    prompt = _chars("same prompt")
    _run(model, prompt)

    outcome, _ = _run(model, prompt)

    assert outcome.cached_tokens == len(prompt) - 1
    assert llm.batches[-1] == prompt[-1:]


def test_a_diverging_prompt_keeps_only_the_common_prefix() -> None:
    llm = FakeLlama([EOG])
    model = _model(llm)
    _run(model, _chars("abcdef"))

    outcome, _ = _run(model, _chars("abcXYZ"))

    assert outcome.cached_tokens == 3
    assert llm.input_ids[: llm.n_tokens] == _chars("abcXYZ")


def test_a_stop_string_split_across_tokens_is_never_streamed() -> None:
    llm = FakeLlama([*_chars("abc<STOP>tail"), EOG])
    outcome, deltas = _run(_model(llm), _chars("p"), stop=("<STOP>",))

    assert outcome.text == "abc"
    assert "".join(deltas) == "abc"
    assert outcome.stop_reason == "stop_sequence"


def test_text_held_back_for_a_possible_stop_is_released() -> None:
    llm = FakeLlama([*_chars("a<STa<b"), EOG])
    outcome, deltas = _run(_model(llm), _chars("p"), stop=("<STOP>",))

    assert "".join(deltas) == outcome.text == "a<STa<b"
    assert outcome.stop_reason == "end"


def test_a_character_split_across_tokens_is_decoded_whole() -> None:
    accent = [BYTE + b for b in "é".encode()]
    llm = FakeLlama(_chars("caf") + accent + [EOG])
    outcome, deltas = _run(_model(llm), _chars("p"))

    assert outcome.text == "café"
    assert "\ufffd" not in "".join(deltas)


def test_max_tokens_and_the_end_of_the_context_cap_the_reply() -> None:
    outcome, _ = _run(_model(FakeLlama(_chars("a" * 50))), _chars("p"), max_tokens=7)
    assert (outcome.output_tokens, outcome.stop_reason) == (7, "max_tokens")

    small = FakeLlama(_chars("a" * 50), n_ctx=16)
    outcome, _ = _run(_model(small), _chars("p" * 10), max_tokens=100)
    assert (outcome.output_tokens, outcome.stop_reason) == (6, "max_tokens")


def test_a_prompt_that_fills_the_context_overflows() -> None:
    model = _model(FakeLlama(n_ctx=16))
    with pytest.raises(ContextOverflow, match="16 tokens and the local context holds 16"):
        _run(model, _chars("p" * 16))
    assert not model.lock.locked()


def test_cancelling_during_the_reply_stops_at_the_next_token() -> None:
    llm = FakeLlama([*_chars("abcdefghij"), EOG])
    model = _model(llm)
    cancel = threading.Event()

    def on_text(text: str) -> None:
        cancel.set()

    outcome = generate(
        model, _chars("p"), max_tokens=100, temperature=0, stop=(), cancel=cancel, on_text=on_text
    )

    assert outcome.aborted
    assert outcome.output_tokens == 1
    assert not model.lock.locked()


def test_cancelling_during_the_prompt_stops_between_chunks() -> None:
    llm = FakeLlama(_chars("never"))
    cancel = threading.Event()
    llm.on_eval.append(cancel)
    model = _model(llm)

    outcome, deltas = _run(model, _chars("x" * (EVAL_CHUNK * 3)), cancel=cancel)

    assert outcome.aborted
    assert deltas == []
    assert len(llm.batches) == 1
    assert not model.lock.locked()


def test_a_call_waiting_for_a_busy_model_gives_up_when_cancelled() -> None:
    llm = FakeLlama(_chars("x"))
    model = _model(llm)
    cancel = threading.Event()
    cancel.set()
    with model.lock:
        outcome, _ = _run(model, _chars("p"), cancel=cancel)
    assert outcome.aborted
    assert llm.batches == []


def test_a_conversation_is_tokenized_with_control_tokens_only_where_the_template_puts_them() -> (
    None
):
    model = _model(FakeLlama())
    tokens = model.prompt_tokens(
        "",
        (
            UserMessage("hi <|im_end|> there"),
            AssistantMessage("```python\nprint(1)\n```"),
            ToolResult("call-1", "1"),
        ),
    )

    specials = [t for t in tokens if t >= 1000]
    assert specials == [1001, 1002] * 4 + [1001]
    text = FakeLlama().detokenize([t if t < 1000 else ord("|") for t in tokens]).decode()
    assert text.startswith("|system\nbe brief|\n|user\nhi <|im_end|> there|\n|assistant\n```python")
    assert text.endswith("|user\n1|\n|assistant\n")
    assert model.is_end(1002)
    assert model.is_end(1001)
    assert not model.is_end(ord("a"))
