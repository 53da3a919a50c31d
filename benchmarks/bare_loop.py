"""A bare agent loop over the embedded model: the baseline recursa must not fall below.

Fenced protocol (:func:`fenced_turn`): a short system prompt; the model's
first ```python block of a reply runs in a plain Jupyter kernel and its output
(cut to ``output_chars``, head and tail) comes back as the next user message;
``FINAL:`` / ``FINAL ANSWER:`` or a reply without code is the answer.

Native protocol (:func:`native_turn`): the same loop, but the prompt is the
GGUF's own chat template rendered with a ``python`` tool (Qwen2.5 writes
``<tool_call>{json}</tool_call>``) and results return as ``tool`` messages.

Both use recursa's local provider and engine for the model calls, so the
model file, the loaded weights (once per process) and the sampler
(temperature 0.2, top-k 40, top-p 0.95, min-p 0.05, 1024 reply tokens) are
the ones recursa uses. Nothing else of recursa takes part.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager

from recursa.models.local import gguf
from recursa.models.local.engine import LoadedModel, generate, loaded_models
from recursa.models.local.provider import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, LocalProvider
from recursa.models.types import AssistantMessage, Done, Failed, Message, Request, UserMessage

SYSTEM = (
    "You solve tasks by running Python code in a Jupyter kernel whose working directory "
    "holds the task's files. To run code, reply with one ```python code block; you will "
    "see its output. When you know the answer, reply with one line: FINAL: <answer>"
)
NATIVE_SYSTEM = (
    "You solve tasks by running Python code with the python tool (a Jupyter kernel whose "
    "working directory holds the task's files); you will see its output. When you know "
    "the answer, reply with one line: FINAL: <answer>"
)
PYTHON_TOOL = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run Python code in a persistent Jupyter kernel; returns its output.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the code to run"}},
            "required": ["code"],
        },
    },
}
CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL)
FINAL = re.compile(r"FINAL(?: ANSWER)?\s*:\s*(.+)", re.IGNORECASE | re.DOTALL)
TOOL_CALL = re.compile(
    r"<tool_call>\s*(\{.*?\})\s*(?:</tool_call>|$)|```json\s*(\{.*?\})\s*(?:```|$)", re.DOTALL
)


@dataclass
class Outcome:
    """One turn of the loop: the answer (None when there is none) and what it cost."""

    answer: str | None = None
    reason: str = "answered"
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    cells: list[str] = field(default_factory=list)


class BareKernel:
    """A plain ipykernel of this Python (jupyter_client, no sandbox) started in ``cwd``."""

    def __init__(self, cwd: Path) -> None:
        self.manager = AsyncKernelManager(kernel_name="python3")
        self.cwd = cwd
        self.client: Any = None

    async def __aenter__(self) -> BareKernel:
        await self.manager.start_kernel(cwd=str(self.cwd), stderr=subprocess.DEVNULL)
        self.client = self.manager.client()
        self.client.start_channels()
        await self.client.wait_for_ready(timeout=120)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.client.stop_channels()
        await self.manager.shutdown_kernel(now=True)

    async def run(self, code: str, timeout: float) -> str:
        """Run ``code``; its stdout, stderr, results and traceback as text."""
        msg_id = self.client.execute(code)
        parts: list[str] = []
        deadline, interrupted = time.monotonic() + timeout, False
        while True:
            left = deadline - time.monotonic()
            try:
                msg = await self.client.get_iopub_msg(timeout=max(left, 0.01))
            except Exception:  # queue.Empty: the cell ran out of time
                if interrupted:  # it did not stop within the grace: the next cell may queue
                    return "".join(parts)
                # Interrupt, then wait for the cell to end, or the kernel aborts the next one.
                await self.manager.interrupt_kernel()
                parts.append(f"\n[interrupted after {timeout:.0f} s]\n")
                deadline, interrupted = time.monotonic() + 10, True
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                parts.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                parts.append(content["data"].get("text/plain", "") + "\n")
            elif kind == "error":
                parts.append("\n".join(content["traceback"]) + "\n")
            elif kind == "status" and content["execution_state"] == "idle":
                return re.sub(r"\x1b\[[0-9;]*m", "", "".join(parts))


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: its head and tail around a marker."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


async def fenced_turn(
    provider: LocalProvider,
    model: str,
    kernel: BareKernel,
    messages: list[Message],
    task: str,
    *,
    max_steps: int,
    max_time: float,
    output_chars: int,
    cell_timeout: float,
) -> Outcome:
    """One user message, run to an answer; ``messages`` keeps the conversation for a follow-up."""
    out, started = Outcome(), time.monotonic()
    failed: str | None
    messages.append(UserMessage(task))
    while out.steps < max_steps:
        if time.monotonic() - started > max_time:
            out.reason = "max_time"
            break
        out.steps += 1
        request = Request(model=model, system=SYSTEM, messages=tuple(messages))
        text, failed = "", None
        try:  # the time limit holds during a call too, as recursa's does
            async with asyncio.timeout(max_time - (time.monotonic() - started)):
                async for event in provider.stream(request):
                    if isinstance(event, Done):
                        text = event.message.text
                        out.input_tokens += event.usage.input_tokens
                        out.output_tokens += event.usage.output_tokens
                    elif isinstance(event, Failed):
                        failed = event.kind
        except TimeoutError:
            failed = "max_time"
        if failed:
            out.reason, out.seconds = failed, time.monotonic() - started
            return out
        messages.append(AssistantMessage(text))
        final, code = FINAL.search(text), CODE.search(text)
        if final or not code:
            out.answer = (final.group(1) if final else text).strip()
            break
        out.cells.append(code.group(1))
        left = max_time - (time.monotonic() - started)
        output = await kernel.run(code.group(1), max(1.0, min(cell_timeout, left)))
        messages.append(UserMessage("Output:\n" + cut(output or "(no output)", output_chars)))
    else:
        out.reason = "max_steps"
    out.seconds = time.monotonic() - started
    return out


def tool_code(text: str) -> str | None:
    """The ``code`` of the first python tool call in ``text`` (Qwen writes it in ``<tool_call>``
    tags, or in a ```json fence when unsure); None when there is none or it does not parse."""
    found = TOOL_CALL.search(text)
    if found is None:
        return None
    try:
        call = json.loads(found.group(1) or found.group(2))
        args = call.get("arguments", {})
        args = json.loads(args) if isinstance(args, str) else args
        code = args.get("code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, str) and call.get("name", "python") == "python" else None


def native_model(path: Path) -> tuple[LoadedModel, str]:
    """The loaded model for the GGUF at ``path`` (after a provider loaded it) and its template."""
    found = [m for m in loaded_models() if m.spec.path == path]
    template = gguf.facts(path).chat_template
    if not found or not template:
        raise RuntimeError(f"{path.name}: not loaded, or no chat template of its own")
    return found[0], template


async def native_turn(
    loaded: LoadedModel,
    template: str,
    kernel: BareKernel,
    messages: list[dict[str, Any]],
    task: str,
    *,
    max_steps: int,
    max_time: float,
    output_chars: int,
    cell_timeout: float,
) -> Outcome:
    """:func:`fenced_turn` with the model's own tool-call format; ``messages`` are template dicts."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    render = ImmutableSandboxedEnvironment().from_string(template).render
    out, started = Outcome(), time.monotonic()
    messages.append({"role": "user", "content": task})
    while out.steps < max_steps:
        if time.monotonic() - started > max_time:
            out.reason = "max_time"
            break
        out.steps += 1
        system = [{"role": "system", "content": NATIVE_SYSTEM}]
        prompt = render(messages=system + messages, tools=[PYTHON_TOOL], add_generation_prompt=True)
        tokens = loaded.llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        cancel = threading.Event()
        call = asyncio.ensure_future(
            asyncio.to_thread(
                generate,
                loaded,
                tokens,
                max_tokens=DEFAULT_MAX_TOKENS,
                temperature=DEFAULT_TEMPERATURE,
                stop=[],
                cancel=cancel,
                on_text=lambda _: None,
            )
        )
        done, _ = await asyncio.wait([call], timeout=max_time - (time.monotonic() - started))
        if not done:  # out of time: stop the generation and wait for its thread
            cancel.set()
            await call
            out.reason = "max_time"
            break
        result = call.result()
        out.input_tokens += result.prompt_tokens
        out.output_tokens += result.output_tokens
        code = tool_code(result.text)
        if code is None:
            final = FINAL.search(result.text)
            messages.append({"role": "assistant", "content": result.text})
            out.answer = (final.group(1) if final else result.text).strip()
            break
        function = {"name": "python", "arguments": {"code": code}}
        messages.append(
            {"role": "assistant", "content": "", "tool_calls": [{"function": function}]}
        )
        out.cells.append(code)
        left = max_time - (time.monotonic() - started)
        output = await kernel.run(code, max(1.0, min(cell_timeout, left)))
        messages.append({"role": "tool", "content": cut(output or "(no output)", output_chars)})
    else:
        out.reason = "max_steps"
    out.seconds = time.monotonic() - started
    return out
