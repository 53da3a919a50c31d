"""The model's context: an immutable base prompt, the project's instruction
files, and the conversation, which is a projection of the session's events.

The base prompt never changes during a session, so providers can cache the
prompt prefix; everything that varies comes after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from recursa.models.types import AssistantMessage, Message, ToolResult, UserMessage
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    Compacted,
    Event,
    ModelUsage,
    UserInput,
)
from recursa.session.cells import parse_fenced
from recursa.session.compaction import Entry, EntryKind, Measure, compacted, summary_entry

_MESSAGE = attrgetter("message")


def answer_rules(no_code: str) -> str:
    """The final-answer rules, one wording for both protocols; ``no_code`` says
    what a reply without code is in the protocol ("without a tool call",
    "with no code block")."""
    return (
        "Find things out by running code rather than guessing, and check an answer with code "
        f"before you give it. When the task is done, reply {no_code}, ending with "
        "FINAL ANSWER: followed by the complete, direct answer; that reply ends the task."
    )


BASE_PROMPT = f"""\
You work in a persistent IPython kernel through one tool, python, which runs a cell and returns its output. \
Variables, imports and files persist between cells. Start a cell with %%bash for shell commands; top-level await works. \
Long outputs are shortened; the full text of cell n is then in _out[n].
{answer_rules("without a tool call")}
Also in the kernel (async; help(name) explains): rlm starts sub-agents that run on their own, \
llm asks a model one question and returns its reply as text (llm.batch for many, e.g. one per chunk of a long input), \
agent_message talks to other agents, harness keeps notes, memories and skills for later turns, \
history searches everything this session did (also what was compacted out of your context), \
goal reads and completes the goal a person set you, heartbeat schedules prompts to yourself."""

FENCED_PROMPT = f"""\
You solve tasks by running Python code in a persistent Python session: \
variables, imports and functions stay defined from one cell to the next.

Rules:
- To run code, reply with exactly one ```python block and nothing after it. \
Then wait: the next message shows the block's output.
- Only printed output (and the value of a final bare expression) is shown, so print what you need to see.
- Your first reply must be a ```python block.
- {answer_rules("with no code block")}"""

ANSWER_HINT = (
    "Send the next ```python block, or, if this answers the task, reply with no code: "
    "the answer after FINAL ANSWER:"
)
"""The line that ends the model's view of a fenced cell that printed something:
small models otherwise rerun a cell whose output already holds the answer.
Nothing follows the marker: small models copy whatever words do (a
placeholder, "and the answer") as their answer."""

CONTEXT_FILE_NAMES = ("AGENTS.md", "CLAUDE.md")
MAX_CONTEXT_FILE_CHARS = 32_000


@dataclass(frozen=True, slots=True)
class ContextFile:
    path: Path
    text: str


def find_context_files(cwd: Path) -> list[ContextFile]:
    """AGENTS.md and CLAUDE.md from the filesystem root down to ``cwd``.

    Outermost first, so the nearest file (the most specific) comes last and
    reads as the final word. Unreadable files are skipped; long ones are cut.
    """
    found: list[ContextFile] = []
    for directory in reversed([cwd, *cwd.parents]):
        for name in CONTEXT_FILE_NAMES:
            path = directory / name
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:  # missing, a directory, unreadable, a symlink loop ...
                continue
            if len(text) > MAX_CONTEXT_FILE_CHARS:
                text = (
                    text[:MAX_CONTEXT_FILE_CHARS]
                    + f"\n[... cut at {MAX_CONTEXT_FILE_CHARS:,} characters]"
                )
            found.append(ContextFile(path, text.strip()))
    return found


def system_prompt(base: str, files: Iterable[ContextFile], supplements: Iterable[str] = ()) -> str:
    """The base prompt, then the instruction files, then supplements (harness state)."""
    parts = [base]
    for file in files:
        if file.text:
            parts.append(f"# Instructions from {file.path}\n\n{file.text}")
    parts.extend(s for s in supplements if s)
    return "\n\n".join(parts)


def sendable(text: str) -> str:
    """Text a provider can encode: a lone surrogate (an undecodable byte, kept
    exactly in the store) becomes U+FFFD for the model."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return text


def render_cell_result(event: CellFinished) -> str:
    """What the model reads for a cell."""
    return event.output if event.output.strip() else "(no output)"


def fenced_result(event: CellFinished, text: str) -> str:
    """A cell's result as a fenced-protocol user message: the output, then
    :data:`ANSWER_HINT` when the cell ran and printed something."""
    message = f"Output:\n```\n{text.rstrip()}\n```"
    if event.status == "ok" and event.output.strip():
        message += "\n" + ANSWER_HINT
    return message


_INPUT_PREFIX = {
    "user": "",
    "system": "[harness] ",
    "parent": "[message from your parent agent] ",
    "child": "[message from a sub-agent] ",
    "sibling": "[message from a sibling agent] ",
    "schedule": "[scheduled prompt] ",
    "goal": "[goal] ",
    "gate": "[gate] ",
}


def render_input(event: UserInput) -> str:
    prefix = _INPUT_PREFIX.get(event.source, "")
    if event.sender and event.source in ("child", "sibling", "parent"):
        prefix = prefix.replace("] ", f" {event.sender}] ")
    return prefix + event.text


class Conversation:
    """The messages of the model's context, kept in step with the event log.

    ``apply`` every persisted event in order (replaying the log rebuilds the
    same list). Native-tool sessions get cell results as tool results;
    fenced-code sessions get them as user messages (ending with
    :data:`ANSWER_HINT` when the cell printed something). A reply cut off at
    the output limit is left out: the store keeps it, the model never rereads it.

    Each message is kept as an :class:`~recursa.session.compaction.Entry`
    with the seq of its event (pass ``seq`` to ``apply``), so a ``compacted``
    event can replace the prefix it summarized: every entry up to its
    ``through``, and the previous summary. When that prefix holds the inputs
    of the turn in progress, the summary message repeats them verbatim.
    ``measured`` is the provider's count of the last step's call (None until
    one is made after the latest compaction).
    """

    def __init__(self, *, fenced: bool) -> None:
        self.fenced = fenced
        self.entries: list[Entry] = []
        self.measured: Measure | None = None
        self.compactions = 0
        self._unanswered: list[str] = []
        self._reply_seq = 0
        self._turn_inputs: list[Entry] = []
        """The inputs of the latest turn (the ones that started it)."""

    @property
    def messages(self) -> list[Message]:
        return list(map(_MESSAGE, self.entries))

    def apply(self, event: Event, seq: int = 0) -> None:
        match event:
            case UserInput(mode=mode):
                self._close_unanswered()
                kind: EntryKind = "input" if mode == "turn" else "steer"
                entry = self._add(seq, kind, UserMessage(sendable(render_input(event))))
                if kind == "input":
                    if self.entries[-2:-1] and self.entries[-2].kind != "input":
                        self._turn_inputs = []
                    self._turn_inputs.append(entry)
            case AssistantReply(text=text, tool_calls=calls, fenced=fenced):
                self._close_unanswered()
                if event.cut_off:
                    return  # stored, but not shown again: the nudge that follows says why
                self._reply_seq = seq
                if fenced:
                    message = AssistantMessage(sendable(parse_fenced(text).kept))
                    self._add(seq, "reply", message)
                else:
                    self._add(seq, "reply", AssistantMessage(sendable(text), calls))
                    self._unanswered = [call.id for call in calls]
            case CellFinished():
                text = sendable(render_cell_result(event))
                if self.fenced:
                    self._add(seq, "result", UserMessage(fenced_result(event, text)))
                else:
                    self._add(seq, "result", ToolResult(event.call_id, text))
                    if event.call_id in self._unanswered:
                        self._unanswered.remove(event.call_id)
            case ModelUsage(step=step, estimated=False) if step > 0:
                # Calls outside the steps (step 0: summaries, refinements) see another context.
                self.measured = Measure(len(self.entries), event.input_tokens + event.output_tokens)
            case Compacted(summary=summary, through=through):
                self.entries = self.compacted(summary, through, seq=seq)
                self.measured = None
                self.compactions += 1
            case _:
                pass

    def compacted(self, summary: str, through: int, *, seq: int = 0) -> list[Entry]:
        """The entries as a compaction through seq ``through`` would leave them."""
        pinned = [e.message.text for e in self._turn_inputs if e.seq <= through]
        return compacted(self.entries, through, summary_entry(seq, summary, pinned))

    def _add(self, seq: int, kind: EntryKind, message: Message) -> Entry:
        entry = Entry(seq, kind, message)
        self.entries.append(entry)
        return entry

    def close_unanswered(self) -> None:
        """Answer the calls of the last reply that never ran as not run: a turn
        resumed after a crash that came between a reply and its later cells
        calls the model again with no new input or reply to close them."""
        self._close_unanswered()

    def _close_unanswered(self) -> None:
        """Every tool call must have a result before the conversation moves on
        (providers reject the request otherwise): a call cut off by an
        interruption or a crash is answered as not run. The answer goes with
        the reply that made the call (its seq), so a compaction never splits them."""
        for call_id in self._unanswered:
            message = ToolResult(call_id, "(not run: the turn was interrupted before this call)")
            self._add(self._reply_seq, "result", message)
        self._unanswered = []

    def snapshot(self) -> tuple[Message, ...]:
        # map and attrgetter: the walk runs in C (it is every step's, over the whole conversation).
        return tuple(map(_MESSAGE, self.entries))


__all__ = [
    "ANSWER_HINT",
    "BASE_PROMPT",
    "CONTEXT_FILE_NAMES",
    "FENCED_PROMPT",
    "ContextFile",
    "Conversation",
    "answer_rules",
    "fenced_result",
    "find_context_files",
    "render_cell_result",
    "render_input",
    "system_prompt",
]
