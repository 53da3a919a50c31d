"""The turn loop with a scripted model and a scripted executor (no kernel here;
the integration tests run it on real kernels)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TypeVar

import pytest

from recursa.config import Limits
from recursa.models.faux import (
    FauxProvider,
    FauxReply,
    FauxStep,
    code,
    fault,
    register_script,
    reply,
    tool_call,
)
from recursa.models.types import Request, Usage
from recursa.protocol.calls import CallEvent
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellStarted,
    Event,
    ModelRetry,
    ModelUsage,
    TextDelta,
    TurnEnded,
    UserInput,
    is_transient,
)
from recursa.session.cells import PYTHON_TOOL
from recursa.session.context import Conversation
from recursa.session.gateway import Gateway, GatewayDeps
from recursa.session.loop import TurnHooks, run_turn

E = TypeVar("E")


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Harness:
    """A minimal session: a conversation, a scripted executor that runs Python
    with exec() and captures print output, and a manual clock."""

    fenced: bool = False
    limits: Limits = field(default_factory=Limits)
    clock: Clock = field(default_factory=Clock)
    cell_cost: float = 0.0
    namespace: dict[str, object] = field(default_factory=dict)
    steer_queue: list[UserInput] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    cells: int = 0

    def __post_init__(self) -> None:
        self.conversation = Conversation(fenced=self.fenced)
        self.provider = FauxProvider()

    def hooks(self, model: str) -> TurnHooks:
        async def execute(cell: int, call_id: str, source: str, limit: float) -> CellFinished:
            self.clock.now += self.cell_cost
            buffer = io.StringIO()
            status = "ok"
            with contextlib.redirect_stdout(buffer):
                try:
                    exec(source, self.namespace)
                except Exception as exc:
                    print(f"{type(exc).__name__}: {exc}")
                    status = "error"
            text = buffer.getvalue()
            return CellFinished(
                cell=cell, call_id=call_id, status=status, output=text, chars=len(text)
            )

        def request() -> Request:
            return Request(
                model=model,
                system="sys",
                messages=self.conversation.snapshot(),
                tools=() if self.fenced else (PYTHON_TOOL,),
            )

        async def no_sleep(delay: float) -> None:
            return None

        gateway = Gateway(
            GatewayDeps(
                provider=self.provider.stream,
                model_name=model,
                model_ref=f"faux/{model}",
                cost=lambda usage: usage.total_tokens * 1e-6,
                clock=self.clock,
                max_retries=2,
                retry_sleep=no_sleep,
            )
        )

        def call(step: int, overflow: bool) -> AsyncIterator[CallEvent]:
            return gateway.stream(request(), step=step)

        def deliver_steers() -> int:
            taken, self.steer_queue[:] = list(self.steer_queue), []
            for steer in taken:
                self.events.append(steer)
                self.conversation.apply(steer)
            return len(taken)

        def next_cell() -> int:
            self.cells += 1
            return self.cells

        return TurnHooks(
            model=call,
            execute=execute,
            deliver_steers=deliver_steers,
            next_cell=next_cell,
            clock=self.clock,
            limits=self.limits,
        )

    async def turn(self, model: str, steps: list[FauxStep], task: str = "task") -> TurnEnded:
        self.script = register_script(model, steps, native_tools=not self.fenced)
        self.conversation.apply(UserInput(text=task))
        end = None
        async for event in run_turn(1, self.hooks(model), fenced=self.fenced):
            self.events.append(event)
            if not is_transient(event):
                self.conversation.apply(event)
            if isinstance(event, TurnEnded):
                end = event
        assert end is not None
        return end

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]


async def test_cells_run_in_order_and_state_persists_until_an_answer() -> None:
    h = Harness()
    end = await h.turn("persist", [code("x = 6 * 7"), code("print(x)"), reply("The answer is 42.")])
    assert (end.reason, end.answer) == ("answered", "The answer is 42.")
    finished = h.of(CellFinished)
    assert [f.output for f in finished] == ["", "42\n"]
    assert [e.type for e in h.events if not is_transient(e)] == [
        "turn_started",
        "assistant_reply", "model_usage", "cell_started", "cell_finished",
        "assistant_reply", "model_usage", "cell_started", "cell_finished",
        "assistant_reply", "model_usage",
        "turn_ended",
    ]  # fmt: skip


async def test_the_model_sees_every_result_before_its_next_call() -> None:
    h = Harness()
    await h.turn("seen", [code("print('marker-1')"), reply("done")])
    requests = h.script.requests
    assert len(requests) == 2
    assert "marker-1" in str(requests[1].messages[-1])


async def test_several_tool_calls_in_one_reply() -> None:
    h = Harness()
    end = await h.turn("multi", [code("a = 1", "print(a + 1)"), reply("2")])
    assert end.answer == "2"
    assert [c.cell for c in h.of(CellStarted)] == [1, 2]


async def test_malformed_arguments_go_back_to_the_model() -> None:
    h = Harness()
    end = await h.turn(
        "bad-args", [tool_call("python", '{"code": "print(1)'), code("print(1)"), reply("ok")]
    )
    assert end.reason == "answered"
    first = h.of(CellFinished)[0]
    assert first.status == "rejected"
    assert "not valid JSON" in first.output
    assert not h.of(CellStarted)[0].code.startswith('{"code"')


async def test_step_limit_stops_with_a_stated_reason() -> None:
    h = Harness(limits=Limits(max_steps=3))
    end = await h.turn("forever", [code("1")] * 10)
    assert end.reason == "max_steps"
    assert "3 model calls" in end.detail
    assert len(h.of(AssistantReply)) == 3


async def test_token_limit() -> None:
    h = Harness(limits=Limits(max_tokens=150))
    usage = Usage(input_tokens=100, output_tokens=10)
    end = await h.turn("tokens", [code("1", usage=usage), code("2", usage=usage), reply("x")])
    assert end.reason == "max_tokens"
    assert len(h.of(AssistantReply)) == 2


async def test_wall_clock_limit_uses_the_injected_clock() -> None:
    h = Harness(limits=Limits(max_time=10), cell_cost=6)
    end = await h.turn("slow", [code("1"), code("2"), code("3"), reply("x")])
    assert end.reason == "max_time"
    assert len(h.of(CellFinished)) == 2


async def test_empty_replies_are_nudged_then_stopped() -> None:
    h = Harness()
    end = await h.turn("empty", [reply("")] * 5)
    assert end.reason == "empty_reply"
    nudges = [e for e in h.of(UserInput) if e.source == "system"]
    assert len(nudges) == 2


async def test_one_empty_reply_then_recovery() -> None:
    h = Harness()
    end = await h.turn("empty-once", [reply(""), reply("fine")])
    assert (end.reason, end.answer) == ("answered", "fine")


async def test_retryable_failures_are_retried_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    end = await h.turn("flaky", [fault("rate_limit", partial="half a rep"), reply("recovered")])
    assert end.answer == "recovered"
    retries = h.of(ModelRetry)
    assert len(retries) == 1
    assert retries[0].kind == "rate_limit"
    # And logged, one line (the daemon's log has no line per request).
    warned = [r.getMessage() for r in caplog.records if r.name == "recursa.session.gateway"]
    assert len(warned) == 1 and "rate_limit" in warned[0] and "retry 1" in warned[0], warned
    # The partial text streamed before the failure is not part of the stored reply.
    assert [r.text for r in h.of(AssistantReply)] == ["recovered"]


async def test_a_final_provider_failure_ends_the_turn(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    end = await h.turn("auth", [fault("auth", "bad key")])
    assert end.reason == "provider_error"
    assert end.detail.startswith("auth:")
    warned = [r.getMessage() for r in caplog.records if r.name == "recursa.session.gateway"]
    assert len(warned) == 1 and "'faux/auth' failed: auth 'faux: bad key'" in warned[0], warned


async def test_a_model_name_cannot_add_lines_to_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A kernel names models (llm(model=...)); the warning keeps it on one line.
    h = Harness()
    end = await h.turn("m\n2026-01-01 INFO forged: line", [fault("auth", "no")])
    assert end.reason == "provider_error"
    warned = [r.getMessage() for r in caplog.records if r.name == "recursa.session.gateway"]
    assert len(warned) == 1 and "\n" not in warned[0] and "m\\n2026" in warned[0], warned


async def test_steering_messages_join_before_the_next_call() -> None:
    h = Harness()

    def steer_then_code(request: Request) -> FauxReply:
        h.steer_queue.append(UserInput(text="also print y", mode="steer"))
        return code("y = 5")

    end = await h.turn("steer", [steer_then_code, reply("done")])
    assert end.answer == "done"
    order = [e.type for e in h.events if not is_transient(e)]
    assert order.index("user_input") > order.index("cell_finished")
    last = h.script.requests[-1]
    assert "also print y" in str(last.messages[-1])


async def test_fenced_protocol() -> None:
    h = Harness(fenced=True)
    end = await h.turn("fenced", [code("x = 3"), code("print(x * 2)"), reply("FINAL ANSWER: 6")])
    assert (end.reason, end.answer) == ("answered", "6")
    assert [f.output for f in h.of(CellFinished)] == ["", "6\n"]
    assert all(r.fenced for r in h.of(AssistantReply))


async def test_a_fenced_reply_that_is_a_bare_call_runs_it_and_is_not_the_answer() -> None:
    # A small model copies the suggested cell without its fence, and a line
    # of the prompt after it: the call runs; the answer comes after its output.
    h = Harness(fenced=True)
    bare = 'print("Richard Strauss")\nsearch again with other words if it is not there)'
    end = await h.turn("bare", [reply(bare), reply("Richard Strauss")])
    assert (end.reason, end.answer) == ("answered", "Richard Strauss")
    assert [c.code for c in h.of(CellStarted)] == ['print("Richard Strauss")']
    assert [f.output for f in h.of(CellFinished)] == ["Richard Strauss\n"]
    assert "```python" in str(h.script.requests[-1].messages)


async def test_usage_and_cost_are_recorded_per_call() -> None:
    h = Harness()
    await h.turn(
        "usage",
        [code("1", usage=Usage(100, 20, cached_tokens=60)), reply("x", usage=Usage(130, 5))],
    )
    usages = h.of(ModelUsage)
    assert [(u.input_tokens, u.output_tokens, u.cached_tokens) for u in usages] == [
        (100, 20, 60),
        (130, 5, 0),
    ]
    assert usages[0].cost == pytest.approx(120e-6)


async def test_text_is_streamed_as_transient_deltas() -> None:
    h = Harness()
    await h.turn("stream", [reply("a reasonably long answer that arrives in pieces")])
    deltas = h.of(TextDelta)
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == "a reasonably long answer that arrives in pieces"


async def test_a_repeated_cell_is_pointed_out_to_the_model() -> None:
    h = Harness(fenced=True)
    await h.turn("repeat", [code("print(1)"), code("print(1)"), reply("1")])
    outputs = [f.output for f in h.of(CellFinished)]
    assert "same as your previous one" not in outputs[0]
    assert "same as your previous one" in outputs[1]


async def test_a_reply_cut_off_at_the_output_limit_is_not_an_answer() -> None:
    h = Harness()
    end = await h.turn("cut", [reply("The answer is 4", stop_reason="max_tokens"), reply("42")])
    assert (end.reason, end.answer) == ("answered", "42")
    nudges = [e for e in h.of(UserInput) if e.source == "system"]
    assert len(nudges) == 1
    assert "cut off" in nudges[0].text


async def test_a_cut_off_code_block_is_not_run() -> None:
    h = Harness(fenced=True)
    cut = FauxReply(text="```python\nprint('half", stop_reason="max_tokens")
    end = await h.turn("cut-code", [cut, code("print(1)"), reply("1")])
    assert end.answer == "1"
    assert [c.code for c in h.of(CellStarted)] == ["print(1)"]


async def test_replies_cut_off_again_and_again_end_the_turn_as_stuck() -> None:
    h = Harness()
    end = await h.turn("cut-forever", [reply("long", stop_reason="max_tokens")] * 5)
    assert end.reason == "stuck"
    assert "cut off" in end.detail


async def test_the_third_identical_cell_is_refused_and_the_fifth_ends_the_turn() -> None:
    h = Harness()
    end = await h.turn("same", [code("print(1)")] * 6)
    assert end.reason == "stuck"
    statuses = [f.status for f in h.of(CellFinished)]
    assert statuses == ["ok", "ok", "rejected", "rejected"]
    assert "identical to your previous 2 cells" in h.of(CellFinished)[2].output
    assert len(h.of(CellStarted)) == 2  # refused cells never reach the kernel


async def test_a_steer_that_arrives_during_the_final_call_is_answered() -> None:
    h = Harness()

    def answer_while_steered(request: Request) -> FauxReply:
        h.steer_queue.append(UserInput(text="and double it", mode="steer"))
        return reply("21")

    end = await h.turn("late-steer", [answer_while_steered, reply("42")])
    assert (end.reason, end.answer) == ("answered", "42")
    assert "and double it" in str(h.script.requests[-1].messages[-1])


async def test_fenced_calls_have_unique_ids_and_json_arguments() -> None:
    h = Harness(fenced=True)
    await h.turn("ids", [code("a = 1"), code("b = 2"), reply("done")])
    calls = [c for r in h.of(AssistantReply) for c in r.tool_calls]
    assert len({c.id for c in calls}) == 2
    assert [json.loads(c.arguments) for c in calls] == [{"code": "a = 1"}, {"code": "b = 2"}]
