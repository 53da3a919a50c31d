"""From a model reply to the cells it asks for, and from a cell to what the model sees.

Two protocols reach the same loop:

- native tools: each ``python`` tool call carries ``{"code": "..."}``; the
  arguments are checked here and a malformed call becomes a *rejected* cell
  whose output tells the model how to call the tool correctly;
- fenced code (models without native tool calls): the first ```python block
  of a reply is its one cell (```bash blocks run as ``%%bash`` cells), and the
  final answer is the text after ``FINAL ANSWER:``, or a reply with no code.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from recursa.models.types import ToolCall, ToolSpec

TOOL_NAME = "python"

PYTHON_TOOL = ToolSpec(
    name=TOOL_NAME,
    description=(
        "Run a cell in your persistent IPython kernel and return its output. "
        "Variables persist between calls; start a cell with %%bash for shell commands; "
        "top-level await works."
    ),
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The cell's source."}},
        "required": ["code"],
        "additionalProperties": False,
    },
)

_FENCE = re.compile(
    r"```[ \t]*(python3?|py|ipython|bash|sh|shell)?[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)",
    re.DOTALL | re.IGNORECASE,
)
_FINAL = re.compile(r"FINAL[ _]ANSWER\s*[:：]\s*", re.IGNORECASE)
_FINAL_CALL = re.compile(r"^\s*final_answer\((.*)\)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class CellRequest:
    """A cell to run, or a rejection to report (``code`` is None, ``error`` says why)."""

    call_id: str
    code: str | None
    error: str | None = None
    repaired: str | None = None
    """What runs instead of ``code`` (fenced cells only): see :func:`repair_answer_marker`."""
    stated: str | None = None
    """The answer a ``FINAL ANSWER:`` line left out of ``code`` stated, if any."""

    @property
    def runs(self) -> str | None:
        """The source that runs."""
        return self.repaired if self.repaired is not None else self.code


def check_tool_call(call: ToolCall) -> CellRequest:
    """Validate a native tool call. The model's mistakes become rejections, never exceptions."""
    if call.name != TOOL_NAME:
        return CellRequest(
            call.id,
            None,
            f'error: there is no tool named {call.name!r}; the only tool is python({{"code": "..."}}).',
        )
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return CellRequest(
            call.id,
            None,
            f"error: the tool arguments were not valid JSON ({exc.msg} at position {exc.pos}); "
            'call python with {"code": "<your cell>"}.',
        )
    if not isinstance(args, dict) or not isinstance(args.get("code"), str):
        return CellRequest(
            call.id,
            None,
            'error: the tool arguments must be an object with a string "code"; nothing was run.',
        )
    code: str = args["code"]
    if not code.strip():
        return CellRequest(call.id, None, "error: the cell was empty; nothing was run.")
    return CellRequest(call.id, code)


@dataclass(frozen=True, slots=True)
class FencedReply:
    """A fenced-protocol reply: the one cell it runs, how many blocks were ignored,
    the final answer when it gave one (only when ``code`` is None), and ``kept``:
    the reply cut after its first block, which is what the model's history keeps
    (small models otherwise copy the guesses they wrote after the code)."""

    code: str | None
    ignored_blocks: int
    answer: str | None
    kept: str
    complete: bool = True
    """False when the code block was never closed (the reply was cut off)."""


def parse_fenced(text: str) -> FencedReply:
    """Find the reply's cell and its final answer.

    A reply with code runs its first block; an answer in the same reply is
    ignored (the model has not seen the output yet). A reply without a block
    that begins with code a kernel runs, a call among it (the suggested
    ``search(context, ...)`` copied without its fence, as small models do),
    runs those lines (:func:`bare_code`). Any other reply without code is an
    answer: the text after ``FINAL ANSWER:`` when the marker is present, else
    the whole reply.
    """
    matches = [m for m in _FENCE.finditer(text) if m.group(2).strip()]
    if matches:
        first = matches[0]
        body = first.group(2).rstrip()
        if (first.group(1) or "").lower() in ("bash", "sh", "shell") and not body.startswith("%%"):
            body = "%%bash\n" + body
        kept = text[: first.end()].rstrip()
        complete = kept.endswith("```")
        if not complete:
            kept += "\n```"
        return FencedReply(
            code=body, ignored_blocks=len(matches) - 1, answer=None, kept=kept, complete=complete
        )
    if not _FINAL.search(text) and not _FINAL_CALL.search(text):
        bare = bare_code(text)
        if bare is not None:
            # The history shows it fenced: the form the model is asked for.
            return FencedReply(
                code=bare, ignored_blocks=0, answer=None, kept=f"```python\n{bare}\n```"
            )
    return FencedReply(code=None, ignored_blocks=0, answer=final_answer(text), kept=text)


_BARE_STATEMENTS = (
    ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Import, ast.ImportFrom,
    ast.For, ast.While, ast.If, ast.With,
)  # fmt: skip


_BARE_MAX_LINES = 40
_CODE_START = re.compile(
    r"\s*(?:(?:import|from|for|while|if|with|await)\s|[A-Za-z_][\w.]*\s*(?:\(|\[|=|[-+*/]=|:))"
)
_AST_FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def bare_code(text: str) -> str | None:
    """The code a reply without a fence begins with: its longest run of leading
    lines that compiles, when every statement there is one a cell is made of
    (an expression, an assignment, an import, a loop, ...), and something is
    called; else None. So ``search(context, "...")`` followed by a line of
    copied prose runs the call, while answers such as ``4430567``,
    ``Richard Strauss`` or ``yes`` stay answers (no call; not Python)."""
    lines = text.strip().splitlines()[:_BARE_MAX_LINES]
    if not lines or not _CODE_START.match(lines[0]):
        return None  # prose: not tried line by line
    for end in range(len(lines), 0, -1):
        code = "\n".join(lines[:end]).rstrip()
        try:
            tree = compile(code, "<reply>", "exec", flags=_AST_FLAGS, dont_inherit=True)
        except (SyntaxError, ValueError):
            continue
        if not tree.body or not all(isinstance(node, _BARE_STATEMENTS) for node in tree.body):
            return None
        if not any(isinstance(node, ast.Call) for node in ast.walk(tree)):
            return None
        return code
    return None


def final_answer(text: str) -> str:
    """The answer in a reply: the text after the last ``FINAL ANSWER:``, else the
    argument of a bare ``final_answer(...)`` line, else the whole reply."""
    marks = list(_FINAL.finditer(text))
    if marks:
        return text[marks[-1].end() :].strip()
    call = _FINAL_CALL.search(text)
    if call:
        return _unquote(call.group(1).strip())
    return text.strip()


_PRINTED_MARKER = re.compile(r"^(\s*)print\(\s*FINAL[ _]ANSWER\s*:\s*(.*?)\s*\)\s*$", re.I)
_BARE_MARKER = re.compile(r"^\s*FINAL[ _]ANSWER\s*:", re.I)


def compiles(code: str) -> bool:
    """``code`` is Python a kernel can run (top-level await allowed)."""
    try:
        compile(code, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def repair_answer_marker(code: str) -> str | None:
    """A fenced cell that is not Python only because the answer marker was
    written in it as if it were: ``print(FINAL ANSWER: {x})`` becomes
    ``print(f"FINAL ANSWER: {x}")`` (the value is printed, so the turn ends
    with it, see :func:`printed_answer`), and a bare ``FINAL ANSWER: ...``
    line is left out (its value is still the cell's :func:`stated_answer`).
    None when ``code`` compiles, has no marker, or is still not Python after."""
    if not _FINAL.search(code) or compiles(code):
        return None
    lines = []
    for line in code.splitlines():
        printed = _PRINTED_MARKER.match(line)
        if printed:
            indent, value = printed.groups()
            if '"' in value or "\\" in value:
                return None
            if "{" not in value:
                value = "{" + value + "}"
            lines.append(f'{indent}print(f"FINAL ANSWER: {value}")')
        elif not _BARE_MARKER.match(line):
            lines.append(line)
    repaired = "\n".join(lines)
    return repaired if repaired.strip() and compiles(repaired) else None


_STATED = re.compile(r"^\s*(?:#\s*)?FINAL[ _]ANSWER\s*[:：]\s*(.*?)\s*$", re.I)


def stated_answer(code: str) -> str | None:
    """The answer a fenced cell states on a line of its own, as a comment
    (``# Final answer: 503.67``) or as bare text (``FINAL ANSWER: 503.67``):
    the last such line's value, else None. Whether it is taken is the
    loop's call (only when output the model has seen holds it)."""
    stated = None
    for line in code.splitlines():
        found = _STATED.match(line)
        if found and found.group(1):
            stated = found.group(1)
    return stated


def marker_only(code: str) -> str | None:
    """The answer a fenced block states when it holds nothing but answer
    lines (``FINAL ANSWER: 9521829`` put in a fence): its value, else None.
    Whether it is taken is the loop's call, as for :func:`stated_answer`."""
    lines = [line for line in code.splitlines() if line.strip()]
    if not lines or not all(_BARE_MARKER.match(line) for line in lines):
        return None  # a comment is Python: it runs, and its stated answer is weighed after
    return stated_answer(code)


_PROSE = re.compile(r"[^\W\d_][\w'’-]*(?: +[^\s()\[\]{}=<>]+){3,}")
_NOT_PROSE_START = frozenset(
    [
        "assert",
        "async",
        "await",
        "class",
        "def",
        "del",
        "elif",
        "else",
        "except",
        "for",
        "from",
        "global",
        "if",
        "import",
        "lambda",
        "match",
        "nonlocal",
        "pass",
        "print",
        "raise",
        "return",
        "try",
        "while",
        "with",
        "yield",
    ]
)


def prose_cell(code: str) -> str | None:
    """A fenced "cell" that is a sentence, not Python (``The number is: 4522457.``
    in a python fence): its text, which the loop reads as a reply without code.
    None for anything that compiles, spans lines, starts with a keyword, or
    has brackets or ``=``, so broken code still runs and fails as code."""
    line = code.strip()
    if "\n" in line or compiles(line) or not _PROSE.fullmatch(line):
        return None
    return None if line.split()[0].lower() in _NOT_PROSE_START else line


def printed_answer(output: str) -> str | None:
    """The answer a cell printed as its last line, ``FINAL ANSWER: ...``, else None."""
    lines = [line for line in output.splitlines() if line.strip()]
    if lines and _BARE_MARKER.match(lines[-1]):
        answer = _FINAL.split(lines[-1], maxsplit=1)[-1].strip()
        return answer or None
    return None


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


__all__ = [
    "PYTHON_TOOL",
    "TOOL_NAME",
    "CellRequest",
    "FencedReply",
    "bare_code",
    "check_tool_call",
    "compiles",
    "final_answer",
    "parse_fenced",
    "printed_answer",
    "prose_cell",
    "repair_answer_marker",
    "stated_answer",
]
