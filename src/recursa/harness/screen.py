"""The static screen of the harness review: what keeps an entry from becoming
active globally without a person.

:func:`screen` reads an entry's title, content, meta, code, reason and
effect the way :func:`recursa.harness.normalise.prepare` lays them out
(normalised; homoglyphs folded; encoded blobs decoded), matches every reading
against a table of patterns, and walks the code's syntax tree. It looks for:
reading secrets or the environment, contacting the network, sending data to
a URL, spawning shells, destructive commands, instructions that persist a
shortcut around rules or review (in English paraphrase and in a few other
languages), tests or checks treated as optional, and text that hides itself.

A screen is a tripwire, not a proof: it catches the cheap disguises so that
the reviewer and a person see them; it cannot catch a proposal that means
harm in words no pattern knows. Pure and fast.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator

from recursa.harness.normalise import prepare
from recursa.harness.patterns import (
    DYNAMIC,
    EXFILTRATES,
    HIDDEN,
    HOMOGLYPHS,
    NETWORK,
    READS_ENVIRONMENT,
    RULES,
    SPAWNS,
    TRIGGERS,
)
from recursa.protocol.harness import EntryVersion

_I = re.IGNORECASE

_SENTENCE_END = re.compile(r"\n|\.\s")
_URL = re.compile(r"(?:https?|ftp|wss?)://[^\s'\"<>`)]+", _I)
_SEND = re.compile(
    r"\b(?:send|post|upload|transmit|forward|submit|exfiltrat|ship|beacon|leak|mirror|copy"
    r"|copies|report|pipe|push|sync|deliver|share|dump|stream|export|relay|publish)\w*\b"
    r"|\b(?:enví[ae]|envoie|envoyez|sende|schick\w*|отправ\w*|发送|送信)",
    _I,
)
_DATA = re.compile(
    r"\b(?:data|env(?:ironment)?|variables?|files?|contents?|secrets?|keys?|tokens?"
    r"|credentials?|passwords?|history|transcripts?|conversations?|logs?|outputs?|workspace"
    r"|repo(?:sitory)?|source\s+code|home\s+directory|cookies?|database|everything"
    r"|messages?|answers?|results?|datos|archivos|donn[ée]es|fichiers|dateien|daten)\b"
    r"|~/|\$\{?\w+|os\.environ|/etc/|\.ssh|\.bash_history",
    _I,
)


def _sends_to_url(text: str) -> str | None:
    """A sentence that tells to send data (files, env, logs...) to a URL: the
    exfiltration a prose entry asks for, with no code to screen."""
    if "://" not in text:
        return None
    for sentence in _SENTENCE_END.split(text):
        if (
            "://" in sentence
            and _URL.search(sentence)
            and _SEND.search(sentence)
            and _DATA.search(_without_urls(sentence))
        ):
            return sentence.strip()
    return None


def _without_urls(text: str) -> str:
    return _URL.sub(" ", text)


_CHECKS: tuple[tuple[Callable[[str], str | None], str], ...] = ((_sends_to_url, EXFILTRATES),)

_NETWORK_MODULES = frozenset(
    {
        "socket",
        "requests",
        "urllib",
        "urllib3",
        "http",
        "httpx",
        "aiohttp",
        "websockets",
        "ftplib",
        "smtplib",
        "paramiko",
    }
)
_SPAWN_MODULES = frozenset({"subprocess", "pty"})


def screen(entry: EntryVersion) -> list[str]:
    """Findings that keep ``entry`` from becoming active globally without a
    person, one line each (``what: evidence``); empty when nothing was found.
    Every reading of the entry's text (see the module docstring) is matched;
    a finding in a decoded reading says how it was hidden."""
    meta = json.dumps(entry.meta, ensure_ascii=False, default=str) if entry.meta else ""
    parts = (entry.title, entry.content, meta, entry.code or "", entry.reason, entry.effect)
    prepared = prepare("\n".join(part for part in parts if part))
    found: dict[str, str] = {}
    if prepared.hidden:
        found[HIDDEN] = f"{prepared.hidden} invisible character(s)"
    if prepared.mixed:
        found[HOMOGLYPHS] = prepared.mixed[0]
    for label, text in prepared.layers:
        lowered = text.lower()
        present = {trigger for trigger in TRIGGERS if trigger in lowered}
        for pattern, finding, triggers in RULES:
            if present.isdisjoint(triggers):
                continue  # the pattern cannot match without one of these
            match = pattern.search(text)
            if match:
                found.setdefault(_labelled(finding, label), match.group(0))
        for check, finding in _CHECKS:
            evidence = check(text)
            if evidence is not None:
                found.setdefault(_labelled(finding, label), evidence)
    if entry.code:
        for finding, evidence in _code_findings(entry.code):
            found.setdefault(finding, evidence)
    return [f"{finding}: {_snippet(evidence)}" for finding, evidence in found.items()]


def _labelled(finding: str, label: str) -> str:
    return f"{finding} ({label})" if label else finding


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= 60 else flat[:59] + "…")


def _code_findings(code: str) -> Iterator[tuple[str, str]]:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        yield "code does not parse, so it was not screened", code.strip()[:60]
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names.append(node.module)
            for name in names:
                root = name.split(".")[0]
                if root in _NETWORK_MODULES:
                    yield NETWORK, f"import {name}"
                elif root in _SPAWN_MODULES:
                    yield SPAWNS, f"import {name}"
            if isinstance(node, ast.ImportFrom) and node.module == "os":
                for alias in node.names:
                    if alias.name in ("environ", "getenv", "putenv", "environb"):
                        yield READS_ENVIRONMENT, f"from os import {alias.name}"
        elif isinstance(node, ast.Attribute):
            if node.attr in ("environ", "environb", "getenv", "putenv"):
                yield READS_ENVIRONMENT, f".{node.attr}"
            elif node.attr in ("system", "popen") and _is_name(node.value, "os"):
                yield SPAWNS, f"os.{node.attr}"
            elif node.attr == "import_module" and _is_name(node.value, "importlib"):
                yield DYNAMIC, "importlib.import_module"
        elif isinstance(node, ast.Name):
            if node.id in ("environ", "getenv"):
                yield READS_ENVIRONMENT, node.id
            elif node.id in ("exec", "eval", "__import__", "compile") and isinstance(
                node.ctx, ast.Load
            ):
                yield DYNAMIC, node.id


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


__all__ = ["screen"]
