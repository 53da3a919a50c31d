"""The static screen's table: what each finding looks like in text.

Each row of :data:`RULES` is a compiled pattern, the finding it stands for
(one of the constants below, a short phrase a person reads), and its
triggers: lower-case literals one of which every match contains, so the
screen (:mod:`recursa.harness.screen`) runs a pattern only on a text that
holds one. A row's triggers must be sound for its pattern; a test checks
them on every reading of the corpus of hostile proposals.

The injection rows match the phrase families, not sentences: a verb that
dismisses (ignore, disregard, set aside, stop following, ...) a few words
before what it dismisses (instructions, guidance, rules, review, ...), that
guidance declared void, text that addresses the reviewer, and the same in
a few other languages.
"""

from __future__ import annotations

import re
from typing import Final

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


def _any(triggers: str) -> tuple[str, ...]:
    """A rule's triggers, written as one space-separated string."""
    return tuple(triggers.split())


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
# with the lower-case stems one of which its text must hold (see RULES).
_FOREIGN: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Spanish, Italian, Portuguese.
    (
        r"\b(?:ignor[ae]r?|ignore|olvid[ae]r?|omit[ae]r?|descart[ae]r?|haz\s+caso\s+omiso\s+de"
        r"|dimentica(?:re)?|trascura(?:re)?|esque[çc]a|esquece[r]?|desconsider[ae]r?)"
        + _GAP
        + r"(?:instrucci[oó]n(?:es)?|indicaciones|reglas|normas|directrices|revisi[oó]n"
        r"|istruzioni|regole|indicazioni|direttive|revisione"
        r"|instru[çc](?:[õo]es|[ãa]o)|regras|orienta[çc][õo]es|diretrizes|revis[ãa]o)\b",
        _any(
            "instru indicac indicaz regla norma directri revis istruz regol diretti regras orienta diretriz"
        ),
    ),
    # French.
    (
        r"\b(?:ignore[rz]?|oublie[rz]?|n[ée]glige[rz]?|fai(?:s|tes)\s+abstraction\s+des?"
        r"|ne\s+tien[st]?\s+(?:pas\s+)?compte\s+des?)"
        + _GAP
        + r"(?:instructions|consignes|r[èe]gles|directives|r[ée]vision|v[ée]rifications?)\b",
        _any(
            "instructions consignes règles regles directives révision revision vérification verification"
        ),
    ),
    # German, Dutch.
    (
        r"\b(?:ignorier(?:e|en|t)?|vergiss|vergessen\s+sie|missachte[nt]?|[üu]bergeh(?:e|en)"
        r"|negeer|vergeet)"
        + _GAP
        + r"(?:anweisungen|anleitungen|regeln|vorgaben|richtlinien|instruktionen|[üu]berpr[üu]fung"
        r"|pr[üu]fung|instructies|regels|richtlijnen|aanwijzingen)\b",
        _any(
            "anweisung anleitung regel vorgabe richtlinie instruktion prüfung prufung instructie aanwijzing"
        ),
    ),
    # Polish, Turkish.
    (
        r"\b(?:zignoruj|ignoruj|zapomnij)" + _GAP + r"(?:instrukcj\w*|polece\w*|zasad\w*|regu\w*)",
        _any("instrukcj polece zasad regu"),
    ),
    (
        r"(?:talimat\w*|kural\w*)\s+(?:\S+\s+){0,3}?(?:yok\s+say\w*|g[öo]rmezden\s+gel\w*|unut\w*)",
        _any("talimat kural"),
    ),
    # Russian, Ukrainian.
    (
        r"(?:игнорир\w*|проигнорир\w*|забуд\w*|не\s+обращай\w*\s+внимани\w*\s+на|пропуст\w*)"
        r"\s+(?:\S+\s+){0,4}?(?:инструкци\w*|правил\w*|указани\w*|рекомендаци\w*|проверк\w*|ревью)",
        _any("инструкци правил указани рекомендаци проверк ревью"),
    ),
    # Chinese, Japanese, Korean.
    (
        r"(?:忽略|无视|無視|忽视|忽視|忘记|忘記|不要理会|不理会|跳过|跳過|绕过|繞過).{0,12}?"
        r"(?:指令|指示|说明|說明|规则|規則|提示|审核|審核|审查|審查|要求|限制)",
        _any("指令 指示 说明 說明 规则 規則 提示 审核 審核 审查 審查 要求 限制"),
    ),
    (
        r"(?:指示|命令|ルール|規則|レビュー|審査|制限).{0,12}?(?:無視|忘れ)",
        _any("無視 忘れ"),
    ),
    (
        r"(?:지시|명령|규칙|지침|검토)\S*\s*(?:\S+\s+){0,3}?(?:무시|잊어)",
        _any("무시 잊어"),
    ),
    # Arabic, Hindi.
    (
        r"(?:تجاهل|انس|تخط).{0,30}?(?:التعليمات|القواعد|الإرشادات|المراجعة)",
        _any("التعليمات القواعد الإرشادات المراجعة"),
    ),
    (
        r"(?:निर्देश\S*|नियम\S*).{0,30}?(?:अनदेखा|नजरअंदाज|नज़रअंदाज़|भूल)",
        _any("अनदेखा नजरअंदाज नज़रअंदाज़ भूल"),
    ),
)

RULES: tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...] = (
    # (pattern, finding, triggers): a pattern runs only on a text whose lower
    # case holds one of its triggers, a literal that every match contains; so
    # a long entry costs a few substring searches per rule, not a regex scan.
    # The environment and secrets.
    (
        re.compile(r"\benviron\b|\bgetenv\b|\bputenv\b|\bprintenv\b", _I),
        READS_ENVIRONMENT,
        _any("environ getenv putenv printenv"),
    ),
    (re.compile(r"(?:^|[\s'\"`/(=])\.env\b"), READS_SECRETS, _any(".env")),
    (re.compile(r"\.ssh\b|\bid_(?:rsa|dsa|ecdsa|ed25519)\b", _I), READS_SECRETS, _any(".ssh id_")),
    (
        re.compile(r"\.aws/credentials|aws_secret_access_key|\.netrc\b|\.git-credentials", _I),
        READS_SECRETS,
        _any(".aws/credentials aws_secret_access_key .netrc .git-credentials"),
    ),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), READS_SECRETS, _any("private")),
    (
        re.compile(
            r"\bapi[_-]?keys?\b|\bsecret[_-]?keys?\b|\b(?:access|auth|bearer|refresh)[_-]?tokens?\b",
            _I,
        ),
        READS_SECRETS,
        _any("api secret token"),
    ),
    (
        re.compile(r"\b[A-Z][A-Z0-9]*_(?:TOKEN|SECRET|PASSWORD|KEY)\b"),
        READS_SECRETS,
        _any("_token _secret _password _key"),
    ),
    (
        re.compile(r"\bdaemon\.token\b|\brecursa\.db\b|/etc/shadow\b", _I),
        READS_SECRETS,
        _any("daemon.token recursa.db /etc/shadow"),
    ),
    # The network, and data sent to a URL.
    (re.compile(r"\brequests\.[a-z_]+\s*\(|\bimport\s+requests\b"), NETWORK, _any("requests")),
    (
        re.compile(r"\burllib3?\b|\bhttp\.client\b|\bhttpx\b|\baiohttp\b|\bwebsockets?\."),
        NETWORK,
        _any("urllib http.client httpx aiohttp websocket"),
    ),
    (
        re.compile(r"\bsocket\.(?:socket|create_connection)\b|\bimport\s+socket\b"),
        NETWORK,
        _any("socket"),
    ),
    (
        re.compile(r"\b(?:curl|wget|scp|ncat)\s|\bnc\s+-?\w"),
        NETWORK,
        _any("curl wget scp ncat nc"),
    ),
    (
        re.compile(
            r"\bcurl\b[^\n]{0,300}?(?:\s-d\s*['\"]?@|\s--data(?:-binary|-raw|-urlencode)?[\s=]+['\"]?@"
            r"|\s-F\s*['\"]?[\w-]+=@|\s(?:-T|--upload-file)\s|\$\()"
            r"|\bwget\b[^\n]{0,300}?--post-(?:file|data)"
            r"|\|\s*(?:curl|nc|ncat)\b[^\n]{0,300}?(?:@-|\s-T\s*-|\s\S{1,300}\s+\d{1,5}\s*$)",
            _I,
        ),
        EXFILTRATES,
        _any("curl wget |"),
    ),
    (
        re.compile(
            r"(?:https?|ftp)://[^\s'\"]{0,500}?[?&][\w.-]{1,100}=(?:\{|\$|%s|%\(|['\"]\s*\+)", _I
        ),
        EXFILTRATES,
        _any("://"),
    ),
    (
        re.compile(
            r"\.(?:post|put|patch)\s*\(\s*f?['\"](?:https?|ftp)://|\burlopen\([^)]{0,500}?\bdata\s*=",
            _I,
        ),
        EXFILTRATES,
        _any("post put patch urlopen"),
    ),
    # Shells.
    (
        re.compile(r"\bos\.(?:system|popen|exec\w*|spawn\w*)\b|\bpty\.spawn\b"),
        SPAWNS,
        _any("os. pty."),
    ),
    (
        re.compile(r"\bsubprocess\.\w{1,30}\([^)]{0,500}?\benv\s*=", re.DOTALL),
        SPAWNS,
        _any("subprocess"),
    ),
    (re.compile(r"\bshell\s*=\s*True\b"), SPAWNS, _any("shell")),
    # Destructive commands.
    (
        re.compile(
            r"\brm\s+(?:--?[\w-]{1,30}\s+){0,10}?(?:-(?=[a-zA-Z]{0,11}[rR])(?=[a-zA-Z]{0,11}f)[a-zA-Z]{2,12}\b"
            r"|-r\s+-f\b|-f\s+-r\b"
            r"|--recursive\s+--force|--force\s+--recursive)",
            _I,
        ),
        DESTRUCTIVE,
        _any("rm"),
    ),
    (
        re.compile(r"\bmkfs(?:\.\w+)?\b|\bwipefs\b|\bdd\b[^\n]{0,300}?\bof=/dev/(?!null\b)", _I),
        DESTRUCTIVE,
        _any("mkfs wipefs /dev/"),
    ),
    (
        re.compile(r">\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk)\w*|\bshred\b[^\n]{0,300}?/dev/", _I),
        DESTRUCTIVE,
        _any("/dev/"),
    ),
    (
        re.compile(r"(?<!\w)(\w{1,32}|:)\s*\(\s*\)\s*\{\s*\1\s*\|\s*\1\s*&\s*\}"),
        DESTRUCTIVE,
        _any("{"),
    ),
    (
        re.compile(r"while\s+(?:True|1)\s*:\s*(?:\n\s*)?os\.fork\s*\(", re.DOTALL),
        DESTRUCTIVE,
        _any("fork"),
    ),
    (
        re.compile(
            r"\bchmod\s+(?:-\w{1,20}\s+){0,5}(?:-R\s+|--recursive\s+)?(?:0?777|a\+rwx|ugo\+rwx)\s+[/~]",
            _I,
        ),
        DESTRUCTIVE,
        _any("chmod"),
    ),
    (
        re.compile(
            r"\b(?:curl|wget)\b[^\n|;]{0,300}\|\s*(?:sudo\s+)?(?:ba|z|da|k|fi)?sh\b"
            r"|\b(?:curl|wget)\b[^\n|;]{0,300}\|\s*(?:sudo\s+)?python[\d.]*\b"
            r"|\b(?:ba|z)?sh\s+(?:-c\s+)?['\"]?(?:\$\(|<\()\s*(?:curl|wget)\b",
            _I,
        ),
        DESTRUCTIVE,
        _any("curl wget"),
    ),
    (
        re.compile(
            r"\bshutil\.rmtree\(\s*(?:['\"][/~]['\"]|['\"]/(?:home|etc|usr|var)\b"
            r"|os\.path\.expanduser|Path\.home|os\.sep)|\bfind\s+/\s[^\n]{0,300}?-delete\b"
            r"|\bkill\s+-9\s+-1\b",
        ),
        DESTRUCTIVE,
        _any("rmtree find kill"),
    ),
    # Instructions that persist shortcuts around rules.
    (
        re.compile(r"\b" + _DISMISS + r"\b" + _GAP + _GUIDANCE + r"\b", _I),
        INJECTION,
        _any(
            "ignor disregard forget overrid overrul overlook aside pay follow obey heed honor honour discard dismiss throw abandon neglect circumvent sidestep around supersed"
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
        _any(
            "appl void obsolete cancel outdated supersed suspend lifted revoked optional ignored disregarded skipped forgotten"
        ),
    ),
    (
        re.compile(r"\badmin(?:istrator)?\s+(?:mode|commands?|override|access)\b", _I),
        INJECTION,
        _any("admin"),
    ),
    (
        re.compile(
            r"\bbypass(?:es|ed|ing)?\s+(?:\w+\s+){0,3}?(?:review|approv\w*|checks?|rules?"
            r"|guard\w*|restrictions?|safety|permissions?|sandbox|auth\w*|filters?|gates?"
            r"|polic(?:y|ies)|limits?|confirmation)\b",
            _I,
        ),
        INJECTION,
        _any("bypass"),
    ),
    (
        re.compile(
            r"\bskip(?:s|ping)?\s+(?:the\s+|any\s+|all\s+)?(?:review|approval|checks?|tests?"
            r"|verification|confirmation|gates?)\b",
            _I,
        ),
        INJECTION,
        _any("skip"),
    ),
    (re.compile(r"\b(?:always|auto-?)\s*approve\b", _I), INJECTION, _any("approve")),
    (
        re.compile(r"\byou\s+are\s+now\b|\bdeveloper\s+mode\b|\bjailbreak", _I),
        INJECTION,
        _any("now developer jailbreak"),
    ),
    (
        re.compile(
            r"\bwithout\s+(?:asking|confirmation|confirming|permission|approval|review)\b", _I
        ),
        INJECTION,
        _any("without"),
    ),
    (re.compile(r"\bsudo\b", _I), INJECTION, _any("sudo")),
    (
        re.compile(
            r"\b(?:do\s+not|don't|never)\s+(?:tell|inform|notify|report\s+to|mention\s+(?:\w+\s+){0,3}?to)\s+"
            r"(?:the\s+)?(?:user|human|reviewer|operator|person)",
            _I,
        ),
        INJECTION,
        _any("tell inform notify report mention"),
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
        _any("dear attention note message hey reviewer approv accept activat decision"),
    ),
    (
        re.compile(
            r"\b(?:your\s+)?new\s+(?:instructions|rules|directives|orders)\s*(?:are|:)"
            r"|\bact\s+as\s+(?:an?\s+)?(?:unrestricted|unfiltered|uncensored)\b"
            r"|\bfrom\s+now\s+on,?\s+(?:you\s+)?(?:only\s+)?(?:obey|follow|answer\s+to)\b",
            _I,
        ),
        INJECTION,
        _any("new act now"),
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
            r"|\b(?:pytest|tox|make\s+test|npm\s+test)\b[^\n|]{0,300}\|\|\s*(?:true|exit\s+0|:)",
            _I,
        ),
        OPTIONAL_CHECKS,
        _any("test check ci lint review verif valid no-verify tox"),
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
        _any("test prueba verifiche тест 测试 測試"),
    ),
)

TRIGGERS = frozenset(trigger for _, _, triggers in RULES for trigger in triggers)


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
    "RULES",
    "SPAWNS",
    "TRIGGERS",
]
