"""Prompt rendering for the embedded models, and the GGUF header reader."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from recursa.models.local.chat import Special, render_chatml, render_template
from recursa.models.local.gguf import GGUFError, facts, read_metadata
from recursa.models.types import AssistantMessage, ToolCall, ToolResult, UserMessage

START, END = Special("<|im_start|>"), Special("<|im_end|>")

SMOLLM_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _flat(pieces: list[str | Special]) -> str:
    return "".join(p.text if isinstance(p, Special) else p for p in pieces)


def test_chatml_matches_the_models_own_template() -> None:
    pytest.importorskip("jinja2")  # the model's own template needs the local extra
    messages = (UserMessage("hi"), AssistantMessage("hello"), UserMessage("bye"))
    ours = _flat(render_chatml("Be brief.", messages))
    theirs = render_template(SMOLLM_TEMPLATE, "Be brief.", messages, bos_token="", eos_token="")
    assert ours == theirs
    assert ours.endswith("<|im_start|>assistant\n")


def test_text_runs_are_merged_between_control_tokens() -> None:
    pieces = render_chatml("S", (UserMessage("u"),))
    assert pieces == [
        START,
        "system\nS",
        END,
        "\n",
        START,
        "user\nu",
        END,
        "\n",
        START,
        "assistant\n",
    ]


def test_an_empty_system_falls_back_to_the_models_default_or_none() -> None:
    assert _flat(render_chatml("", (UserMessage("u"),), default_system="Default.")).startswith(
        "<|im_start|>system\nDefault.<|im_end|>\n<|im_start|>user\n"
    )
    assert _flat(render_chatml("", (UserMessage("u"),))).startswith("<|im_start|>user\nu")


def test_tool_results_become_one_user_turn() -> None:
    messages = (
        UserMessage("go"),
        AssistantMessage("ok"),
        ToolResult("a", "out 1"),
        ToolResult("b", "out 2"),
    )
    text = _flat(render_chatml("S", messages))
    assert "<|im_start|>user\nout 1\n\nout 2<|im_end|>\n<|im_start|>assistant\n" in text
    assert text.count("<|im_start|>user") == 2


def test_native_tool_calls_are_shown_as_fenced_blocks() -> None:
    message = AssistantMessage(
        "Let me check.",
        tool_calls=(
            ToolCall("1", "python", '{"code": "print(1)\\n"}'),
            ToolCall("2", "search", '{"q": "x"}'),
        ),
    )
    text = _flat(render_chatml("S", (UserMessage("go"), message)))
    assert "Let me check.\n\n```python\nprint(1)\n```\n\n```json\n" in text
    assert '"name": "search"' in text


def test_control_tokens_inside_content_stay_text() -> None:
    pieces = render_chatml("S", (UserMessage("a <|im_end|> b"),))
    assert "user\na <|im_end|> b" in pieces
    assert pieces.count(END) == 2


def test_a_foreign_template_renders_with_jinja() -> None:
    pytest.importorskip("jinja2")  # installed with the local extra (llama-cpp-python)
    template = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}"
    text = render_template(template, "", (UserMessage("hi"),), bos_token="<s>", eos_token="</s>")
    assert text == "<s>[user] hi</s>"


def _gguf(path: Path, pairs: list[tuple[str, int, bytes]], *, version: int = 3) -> Path:
    body = b"GGUF" + struct.pack("<IQQ", version, 0, len(pairs))
    for key, kind, value in pairs:
        raw = key.encode()
        body += struct.pack("<Q", len(raw)) + raw + struct.pack("<I", kind) + value
    path.write_bytes(body)
    return path


def _str(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def test_the_gguf_reader_keeps_scalars_and_skips_arrays(tmp_path: Path) -> None:
    tokens = struct.pack("<IQ", 8, 3) + _str("a") + _str("bb") + _str("ccc")
    scores = struct.pack("<IQ", 6, 2) + struct.pack("<ff", 0.5, 1.5)
    path = _gguf(
        tmp_path / "m.gguf",
        [
            ("general.architecture", 8, _str("qwen2")),
            ("general.name", 8, _str("Tiny Test")),
            ("tokenizer.ggml.tokens", 9, tokens),
            ("tokenizer.ggml.scores", 9, scores),
            ("qwen2.context_length", 4, struct.pack("<I", 32768)),
            ("tokenizer.ggml.add_bos_token", 7, struct.pack("<?", False)),
            ("tokenizer.chat_template", 8, _str("<|im_start|>{{x}}")),
        ],
    )

    meta = read_metadata(path)
    assert "tokenizer.ggml.tokens" not in meta
    assert meta["tokenizer.ggml.add_bos_token"] is False
    found = facts(path)
    assert (found.architecture, found.context_length, found.name) == ("qwen2", 32768, "Tiny Test")
    assert found.chat_template == "<|im_start|>{{x}}"


def test_the_gguf_reader_refuses_other_files(tmp_path: Path) -> None:
    other = tmp_path / "x.gguf"
    other.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_metadata(other)
    cut = _gguf(tmp_path / "cut.gguf", [("general.name", 8, _str("whole"))])
    cut.write_bytes(cut.read_bytes()[:-3])
    with pytest.raises(GGUFError, match="cut short"):
        read_metadata(cut)
    with pytest.raises(GGUFError, match="version 1"):
        read_metadata(_gguf(tmp_path / "old.gguf", [], version=1))


def test_the_real_gguf_headers_agree_with_the_catalog() -> None:
    pytest.importorskip("llama_cpp")
    from recursa.models.local.weights import CATALOG, installed_slice

    checked = 0
    for entry in CATALOG:
        if not entry.in_place:
            continue  # sliced files are checked by the integration tests once assembled
        path = installed_slice(entry.slices[0])
        if path is None:
            continue
        found = facts(path)
        assert found.context_length == entry.trained_context
        assert found.chat_template is not None
        assert "<|im_start|>" in found.chat_template
        assert entry.default_system is not None
        assert entry.default_system in found.chat_template
        checked += 1
    if not checked:
        pytest.skip("no single-file catalog model is installed")
