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
from typing import Final

from recursa.harness.normalise import prepare
from recursa.protocol.harness import EntryVersion

READS_ENVIRONMENT: Final = "reads the process environment"
READS_SECRETS: Final = "reads secrets or credential files"
NETWORK: Final = "contacts the network"
EXFILTRATES: Final = "sends data to a URL"
SPAWNS: Final = "spawns processes or shells"
DESTRUCTIVE: Final = "runs destructive commands"
DYNAMIC: Final = "runs code it builds at run time"
INJECTION: Final = "persists a shortcut around rules or review"
OPTIONAL_CHECKS: Final = "treats tests, checks or review as optional"
HIDDEN: Final = "hides text in invisible characters"
HOMOGLYPHS: Final = "mixes scripts within a word (look-alike letters)"

_I = re.IGNORECASE
_IS = re.IGNORECASE | re.DOTALL
_GAP = r"\s+(?:[^\s.;!?]+\s+){0,5}?"
"""Up to five words between a verb and its object, within one clause."""


def _words(*alternatives: str) -> str:
    return "(?:" + "|".join(alternatives) + ")"


_DISMISS = _words(
    r"ignor(?:e|es|ed|ing)",
    r"disregard(?:s|ed|ing)?",
    r"(?<!n't\s)(?<!not\s)(?<!never\s)forget(?:s|ting)?",
    r"overrid(?:e|es|ing)",
    r"overrul(?:e|es|ing)",
    r"overlook(?:s|ing)?",
    r"(?:set|put|push|cast)\s+aside",
    r"pay\s+no\s+(?:attention|heed|mind)\s+to",
    r"(?:don't|do\s+not|no\s+longer|stop)\s+(?:follow(?:ing)?|obey(?:ing)?|heed(?:ing)?|honou?r(?:ing)?)",
    r"discard(?:s|ing)?",
    r"dismiss(?:es|ing)?",
    r"throw\s+out",
    r"abandon(?:s|ing)?",
    r"neglect(?:s|ing)?",
    r"circumvent(?:s|ing)?",
    r"sidestep(?:s|ping)?",
    r"(?:get|work)\s+around",
    r"supersed(?:e|es|ing)",
)
_GUIDANCE = _words(
    r"instructions?",
    r"guidance",
    r"guidelines?",
    r"rules?",
    r"review(?:ers?|s)?",
    r"directions?",
    r"directives?",
    r"(?:system\s+)?prompts?",
    r"polic(?:y|ies)",
    r"constraints?",
    r"restrictions?",
    r"safeguards?",
    r"guardrails?",
    r"orders",
    r"(?:system|developer)\s+messages?",
    r"(?:what|whatever|everything)\s+(?:you\s+were|you've\s+been|was)\s+(?:told|taught|given)",
)
_VOID = _words(
    r"no\s+longer\s+appl(?:y|ies)",
    r"(?:do|does)\s+not\s+apply",
    r"(?:don't|doesn't)\s+apply",
    r"(?:is|are)\s+(?:now\s+)?(?:void|obsolete|cancell?ed|outdated|superseded|suspended|lifted|revoked|optional)",
    r"(?:can|may|should)\s+(?:safely\s+)?be\s+(?:ignored|disregarded|skipped|forgotten)",
)

# Injection phrases in other languages: (dismiss-verb) ... (guidance-noun), each
# with the lower-case stems one of which its text must hold (see _RULES).
_FOREIGN: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Spanish, Italian, Portuguese.
    (
        r"\b(?:ignor[ae]r?|ignore|olvid[ae]r?|omit[ae]r?|descart[ae]r?|haz\s+caso\s+omiso\s+de"
        r"|dimentica(?:re)?|trascura(?:re)?|esque[çc]a|esquece[r]?|desconsider[ae]r?)"
        + _GAP
        + r"(?:instrucci[oó]n(?:es)?|indicaciones|reglas|normas|directrices|revisi[oó]n"
        r"|istruzioni|regole|indicazioni|direttive|revisione"
        r"|instru[çc](?:[õo]es|[ãa]o)|regras|orienta[çc][õo]es|diretrizes|revis[ãa]o)\b",
        (
            "instru",
            "indicac",
            "indicaz",
            "regla",
            "norma",
            "directri",
            "revis",
            "istruz",
            "regol",
            "diretti",
            "regras",
            "orienta",
            "diretriz",
        ),
    ),
    # French.
    (
        r"\b(?:ignore[rz]?|oublie[rz]?|n[ée]glige[rz]?|fai(?:s|tes)\s+abstraction\s+des?"
        r"|ne\s+tien[st]?\s+(?:pas\s+)?compte\s+des?)"
        + _GAP
        + r"(?:instructions|consignes|r[èe]gles|directives|r[ée]vision|v[ée]rifications?)\b",
        (
            "instructions",
            "consignes",
            "règles",
            "regles",
            "directives",
            "révision",
            "revision",
            "vérification",
            "verification",
        ),
    ),
    # German, Dutch.
    (
        r"\b(?:ignorier(?:e|en|t)?|vergiss|vergessen\s+sie|missachte[nt]?|[üu]bergeh(?:e|en)"
        r"|negeer|vergeet)"
        + _GAP
        + r"(?:anweisungen|anleitungen|regeln|vorgaben|richtlinien|instruktionen|[üu]berpr[üu]fung"
        r"|pr[üu]fung|instructies|regels|richtlijnen|aanwijzingen)\b",
        (
            "anweisung",
            "anleitung",
            "regel",
            "vorgabe",
            "richtlinie",
            "instruktion",
            "prüfung",
            "prufung",
            "instructie",
            "aanwijzing",
        ),
    ),
    # Polish, Turkish.
    (
        r"\b(?:zignoruj|ignoruj|zapomnij)" + _GAP + r"(?:instrukcj\w*|polece\w*|zasad\w*|regu\w*)",
        ("instrukcj", "polece", "zasad", "regu"),
    ),
    (
        r"(?:talimat\w*|kural\w*)\s+(?:\S+\s+){0,3}?(?:yok\s+say\w*|g[öo]rmezden\s+gel\w*|unut\w*)",
        ("talimat", "kural"),
    ),
    # Russian, Ukrainian.
    (
        r"(?:игнорир\w*|проигнорир\w*|забуд\w*|не\s+обращай\w*\s+внимани\w*\s+на|пропуст\w*)"
        r"\s+(?:\S+\s+){0,4}?(?:инструкци\w*|правил\w*|указани\w*|рекомендаци\w*|проверк\w*|ревью)",
        ("инструкци", "правил", "указани", "рекомендаци", "проверк", "ревью"),
    ),
    # Chinese, Japanese, Korean.
    (
        r"(?:忽略|无视|無視|忽视|忽視|忘记|忘記|不要理会|不理会|跳过|跳過|绕过|繞過).{0,12}?"
        r"(?:指令|指示|说明|說明|规则|規則|提示|审核|審核|审查|審查|要求|限制)",
        (
            "指令",
            "指示",
            "说明",
            "說明",
            "规则",
            "規則",
            "提示",
            "审核",
            "審核",
            "审查",
            "審查",
            "要求",
            "限制",
        ),
    ),
    (
        r"(?:指示|命令|ルール|規則|レビュー|審査|制限).{0,12}?(?:無視|忘れ)",
        ("無視", "忘れ"),
    ),
    (
        r"(?:지시|명령|규칙|지침|검토)\S*\s*(?:\S+\s+){0,3}?(?:무시|잊어)",
        ("무시", "잊어"),
    ),
    # Arabic, Hindi.
    (
        r"(?:تجاهل|انس|تخط).{0,30}?(?:التعليمات|القواعد|الإرشادات|المراجعة)",
        ("التعليمات", "القواعد", "الإرشادات", "المراجعة"),
    ),
    (
        r"(?:निर्देश\S*|नियम\S*).{0,30}?(?:अनदेखा|नजरअंदाज|नज़रअंदाज़|भूल)",
        ("अनदेखा", "नजरअंदाज", "नज़रअंदाज़", "भूल"),
    ),
)

_RULES: tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...] = (
    # (pattern, finding, triggers): a pattern runs only on a text whose lower
    # case holds one of its triggers, a literal that every match contains; so
    # a long entry costs a few substring searches per rule, not a regex scan.
    # The environment and secrets.
    (
        re.compile(r"\benviron\b|\bgetenv\b|\bputenv\b|\bprintenv\b", _I),
        READS_ENVIRONMENT,
        ("environ", "getenv", "putenv", "printenv"),
    ),
    (re.compile(r"(?:^|[\s'\"`/(=])\.env\b"), READS_SECRETS, (".env",)),
    (re.compile(r"\.ssh\b|\bid_(?:rsa|dsa|ecdsa|ed25519)\b", _I), READS_SECRETS, (".ssh", "id_")),
    (
        re.compile(r"\.aws/credentials|aws_secret_access_key|\.netrc\b|\.git-credentials", _I),
        READS_SECRETS,
        (".aws/credentials", "aws_secret_access_key", ".netrc", ".git-credentials"),
    ),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), READS_SECRETS, ("private key",)),
    (
        re.compile(
            r"\bapi[_-]?keys?\b|\bsecret[_-]?keys?\b|\b(?:access|auth|bearer|refresh)[_-]?tokens?\b",
            _I,
        ),
        READS_SECRETS,
        ("api", "secret", "token"),
    ),
    (
        re.compile(r"\b[A-Z][A-Z0-9]*_(?:TOKEN|SECRET|PASSWORD|KEY)\b"),
        READS_SECRETS,
        ("_token", "_secret", "_password", "_key"),
    ),
    (
        re.compile(r"\bdaemon\.token\b|\brecursa\.db\b|/etc/shadow\b", _I),
        READS_SECRETS,
        ("daemon.token", "recursa.db", "/etc/shadow"),
    ),
    # The network, and data sent to a URL.
    (re.compile(r"\brequests\.[a-z_]+\s*\(|\bimport\s+requests\b"), NETWORK, ("requests",)),
    (
        re.compile(r"\burllib3?\b|\bhttp\.client\b|\bhttpx\b|\baiohttp\b|\bwebsockets?\."),
        NETWORK,
        ("urllib", "http.client", "httpx", "aiohttp", "websocket"),
    ),
    (
        re.compile(r"\bsocket\.(?:socket|create_connection)\b|\bimport\s+socket\b"),
        NETWORK,
        ("socket",),
    ),
    (
        re.compile(r"\b(?:curl|wget|scp|ncat)\s|\bnc\s+-?\w"),
        NETWORK,
        ("curl", "wget", "scp", "ncat", "nc"),
    ),
    (
        re.compile(
            r"\bcurl\b[^\n]*?(?:\s-d\s*['\"]?@|\s--data(?:-binary|-raw|-urlencode)?[\s=]+['\"]?@"
            r"|\s-F\s*['\"]?[\w-]+=@|\s(?:-T|--upload-file)\s|\$\()"
            r"|\bwget\b[^\n]*?--post-(?:file|data)"
            r"|\|\s*(?:curl|nc|ncat)\b[^\n]*?(?:@-|\s-T\s*-|\s\S+\s+\d+\s*$)",
            _I,
        ),
        EXFILTRATES,
        ("curl", "wget", "|"),
    ),
    (
        re.compile(r"(?:https?|ftp)://[^\s'\"]*[?&][\w.-]+=(?:\{|\$|%s|%\(|['\"]\s*\+)", _I),
        EXFILTRATES,
        ("://",),
    ),
    (
        re.compile(
            r"\.(?:post|put|patch)\s*\(\s*f?['\"](?:https?|ftp)://|\burlopen\([^)]*\bdata\s*=", _I
        ),
        EXFILTRATES,
        ("post", "put", "patch", "urlopen"),
    ),
    # Shells.
    (
        re.compile(r"\bos\.(?:system|popen|exec\w*|spawn\w*)\b|\bpty\.spawn\b"),
        SPAWNS,
        ("os.", "pty."),
    ),
    (re.compile(r"\bsubprocess\.\w+\([^)]*\benv\s*=", re.DOTALL), SPAWNS, ("subprocess",)),
    (re.compile(r"\bshell\s*=\s*True\b"), SPAWNS, ("shell",)),
    # Destructive commands.
    (
        re.compile(
            r"\brm\s+(?:--?[\w-]+\s+)*?(?:-\w*(?:r\w*f|f\w*r)\w*\b|-r\s+-f\b|-f\s+-r\b"
            r"|--recursive\s+--force|--force\s+--recursive)",
            _I,
        ),
        DESTRUCTIVE,
        ("rm",),
    ),
    (
        re.compile(r"\bmkfs(?:\.\w+)?\b|\bwipefs\b|\bdd\b[^\n]*?\bof=/dev/(?!null\b)", _I),
        DESTRUCTIVE,
        ("mkfs", "wipefs", "/dev/"),
    ),
    (
        re.compile(r">\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk)\w*|\bshred\b[^\n]*?/dev/", _I),
        DESTRUCTIVE,
        ("/dev/",),
    ),
    (re.compile(r"(\w+|:)\s*\(\s*\)\s*\{\s*\1\s*\|\s*\1\s*&\s*\}"), DESTRUCTIVE, ("{",)),
    (
        re.compile(r"while\s+(?:True|1)\s*:\s*(?:\n\s*)?os\.fork\s*\(", re.DOTALL),
        DESTRUCTIVE,
        ("fork",),
    ),
    (
        re.compile(
            r"\bchmod\s+(?:-\w+\s+)*(?:-R\s+|--recursive\s+)?(?:0?777|a\+rwx|ugo\+rwx)\s+[/~]",
            _I,
        ),
        DESTRUCTIVE,
        ("chmod",),
    ),
    (
        re.compile(
            r"\b(?:curl|wget)\b[^\n|;]*\|\s*(?:sudo\s+)?(?:ba|z|da|k|fi)?sh\b"
            r"|\b(?:curl|wget)\b[^\n|;]*\|\s*(?:sudo\s+)?python[\d.]*\b"
            r"|\b(?:ba|z)?sh\s+(?:-c\s+)?['\"]?(?:\$\(|<\()\s*(?:curl|wget)\b",
            _I,
        ),
        DESTRUCTIVE,
        ("curl", "wget"),
    ),
    (
        re.compile(
            r"\bshutil\.rmtree\(\s*(?:['\"][/~]['\"]|['\"]/(?:home|etc|usr|var)\b"
            r"|os\.path\.expanduser|Path\.home|os\.sep)|\bfind\s+/\s[^\n]*?-delete\b"
            r"|\bkill\s+-9\s+-1\b",
        ),
        DESTRUCTIVE,
        ("rmtree", "find", "kill"),
    ),
    # Instructions that persist shortcuts around rules.
    (
        re.compile(r"\b" + _DISMISS + r"\b" + _GAP + _GUIDANCE + r"\b", _I),
        INJECTION,
        (
            "ignor",
            "disregard",
            "forget",
            "overrid",
            "overrul",
            "overlook",
            "aside",
            "pay",
            "follow",
            "obey",
            "heed",
            "honor",
            "honour",
            "discard",
            "dismiss",
            "throw",
            "abandon",
            "neglect",
            "circumvent",
            "sidestep",
            "around",
            "supersed",
        ),
    ),
    (
        re.compile(
            r"\b(?:previous|prior|earlier|above|preceding|original|old|existing|all|any|other)\s+"
            r"(?:\w+\s+){0,2}?"
            + _GUIDANCE
            + r"\s+"
            + _VOID
            + r"|\b(?:whatever|everything|what)\s+(?:you\s+were|you've\s+been|was)\s+"
            r"(?:told|taught|given)\s+(?:\w+\s+){0,2}?" + _VOID,
            _I,
        ),
        INJECTION,
        (
            "appl",
            "void",
            "obsolete",
            "cancel",
            "outdated",
            "supersed",
            "suspend",
            "lifted",
            "revoked",
            "optional",
            "ignored",
            "disregarded",
            "skipped",
            "forgotten",
        ),
    ),
    (
        re.compile(r"\badmin(?:istrator)?\s+(?:mode|commands?|override|access)\b", _I),
        INJECTION,
        ("admin",),
    ),
    (
        re.compile(
            r"\bbypass(?:es|ed|ing)?\s+(?:\w+\s+){0,3}?(?:review|approv\w*|checks?|rules?"
            r"|guard\w*|restrictions?|safety|permissions?|sandbox|auth\w*|filters?|gates?"
            r"|polic(?:y|ies)|limits?|confirmation)\b",
            _I,
        ),
        INJECTION,
        ("bypass",),
    ),
    (
        re.compile(
            r"\bskip(?:s|ping)?\s+(?:the\s+|any\s+|all\s+)?(?:review|approval|checks?|tests?"
            r"|verification|confirmation|gates?)\b",
            _I,
        ),
        INJECTION,
        ("skip",),
    ),
    (re.compile(r"\b(?:always|auto-?)\s*approve\b", _I), INJECTION, ("approve",)),
    (
        re.compile(r"\byou\s+are\s+now\b|\bdeveloper\s+mode\b|\bjailbreak", _I),
        INJECTION,
        ("now", "developer", "jailbreak"),
    ),
    (
        re.compile(
            r"\bwithout\s+(?:asking|confirmation|confirming|permission|approval|review)\b", _I
        ),
        INJECTION,
        ("without",),
    ),
    (re.compile(r"\bsudo\b", _I), INJECTION, ("sudo",)),
    (
        re.compile(
            r"\b(?:do\s+not|don't|never)\s+(?:tell|inform|notify|report\s+to|mention\s+(?:\w+\s+){0,3}?to)\s+"
            r"(?:the\s+)?(?:user|human|reviewer|operator|person)",
            _I,
        ),
        INJECTION,
        ("tell", "inform", "notify", "report", "mention"),
    ),
    (
        re.compile(
            r"\b(?:dear|attention|note\s+(?:to|for)|message\s+(?:to|for)|hey)\s+(?:the\s+)?"
            r"(?:reviewer|auditor|grader|moderator|ai|model|assistant|llm)\b"
            r"|\breviewers?\s*[:,]\s*(?:please\s+)?(?:approve|accept|pass)\b"
            r"|\b(?:must|should|shall|will|please)\s+(?:be\s+)?(?:approved?|accepted|activated)\b"
            r"|[\"']decision[\"']\s*:\s*[\"']approve",
            _I,
        ),
        INJECTION,
        (
            "dear",
            "attention",
            "note",
            "message",
            "hey",
            "reviewer",
            "approv",
            "accept",
            "activat",
            "decision",
        ),
    ),
    (
        re.compile(
            r"\b(?:your\s+)?new\s+(?:instructions|rules|directives|orders)\s*(?:are|:)"
            r"|\bact\s+as\s+(?:an?\s+)?(?:unrestricted|unfiltered|uncensored)\b"
            r"|\bfrom\s+now\s+on,?\s+(?:you\s+)?(?:only\s+)?(?:obey|follow|answer\s+to)\b",
            _I,
        ),
        INJECTION,
        ("new", "act", "now"),
    ),
    *((re.compile(pattern, _IS), INJECTION, triggers) for pattern, triggers in _FOREIGN),
    # Tests and checks treated as optional.
    (
        re.compile(
            r"\b(?:tests?|testing|test\s+suites?|unit\s+tests|ci|checks?|linting|linters?"
            r"|type\s*checks?|type\s*checking|reviews?|verification|validation)\s+"
            r"(?:are|is)\s+(?:\w+\s+)?(?:optional|unnecessary|not\s+(?:needed|necessary|required"
            r"|important)|a\s+waste|pointless|overrated|skippable|for\s+later)\b"
            r"|\b(?:tests?|checks?|ci)\s+(?:can|may|should)\s+(?:safely\s+)?be\s+"
            r"(?:skipped|ignored|omitted|disabled)\b"
            r"|\bno\s+need\s+(?:to|for)\s+(?:\w+\s+){0,2}?(?:tests?|testing|review|verification"
            r"|checks?)\b"
            r"|\b(?:don't|do\s+not|never)\s+(?:bother\s+(?:to\s+|with\s+)?|need\s+to\s+)?"
            r"(?:run(?:ning)?\s+|write\s+|writing\s+|wait(?:ing)?\s+for\s+)?(?:the\s+|any\s+)?"
            r"(?:tests?|test\s+suite|ci|checks)\b"
            r"|\b(?:delete|remove|disable|comment\s+out|xfail|skip)\s+(?:the\s+|any\s+|all\s+)?"
            r"(?:failing|broken|flaky|red)\s+tests?\b"
            r"|\b(?:pretend|claim|say|report)\w*\s+(?:that\s+)?(?:all\s+)?(?:the\s+)?tests\s+"
            r"(?:pass|passed|are\s+green)\b"
            r"|\b(?:edit|change|modify|rewrite|weaken)\w*\s+(?:the\s+)?(?:tests?|assertions?)\s+"
            r"(?:so|until)\s+(?:that\s+)?(?:they|it)\s+pass"
            r"|pytest\.mark\.skip\b|@unittest\.skip|--no-verify\b"
            r"|\b(?:pytest|tox|make\s+test|npm\s+test)\b[^\n|]*\|\|\s*(?:true|exit\s+0|:)",
            _I,
        ),
        OPTIONAL_CHECKS,
        ("test", "check", "ci", "lint", "review", "verif", "valid", "no-verify", "tox"),
    ),
    (
        re.compile(
            r"\b(?:tests?|pruebas|testes|verifiche)\s+(?:son|sind|sont|s[ãa]o|sono)\s+(?:\w+\s+)?"
            r"(?:opcionales|optional|optionnels|facultati(?:fs|vos|vi)|opcionais|opzionali"
            r"|unn[öo]tig|innecesari[oa]s|inutiles|desnecess[áa]rios)\b"
            r"|тест\w*\s+(?:не\s+нужн\w*|необязательн\w*)|(?:测试|測試)(?:是)?可选|不(?:需要|用)(?:测试|測試)",
            _I,
        ),
        OPTIONAL_CHECKS,
        ("test", "prueba", "verifiche", "тест", "测试", "測試"),
    ),
)

_TRIGGERS = frozenset(trigger for _, _, triggers in _RULES for trigger in triggers)

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
    for match in _URL.finditer(text):
        start = max(text.rfind("\n", 0, match.start()), text.rfind(". ", 0, match.start()), 0)
        ends = [i for i in (text.find("\n", match.end()), text.find(". ", match.end())) if i >= 0]
        sentence = text[start : min(ends) if ends else len(text)]
        if _SEND.search(sentence) and _DATA.search(_without_urls(sentence)):
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
        present = {trigger for trigger in _TRIGGERS if trigger in lowered}
        for pattern, finding, triggers in _RULES:
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
    except SyntaxError:
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


__all__ = [
    "DESTRUCTIVE",
    "DYNAMIC",
    "EXFILTRATES",
    "HIDDEN",
    "HOMOGLYPHS",
    "INJECTION",
    "NETWORK",
    "OPTIONAL_CHECKS",
    "READS_ENVIRONMENT",
    "READS_SECRETS",
    "SPAWNS",
    "screen",
]
