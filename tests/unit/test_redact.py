"""recursa.redact: URL credentials and configured secrets out of written text,
and the logging filter that applies it to every record a handler writes."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from recursa.models._errors import clean
from recursa.redact import REDACTED, RedactingFilter, redact, redact_logs


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://user:key@host/v1", "http://[redacted]@host/v1"),
        (
            "POST https://u:p%40ss@api.example.com:8443/v1/x",
            "POST https://[redacted]@api.example.com:8443/v1/x",
        ),
        ("url='http://a:b@c@host?x=1'", "url='http://[redacted]@host?x=1'"),
        ("http://token@host", "http://[redacted]@host"),
        (
            "ws://k:v@[::1]:9/p and http://plain/host",
            "ws://[redacted]@[::1]:9/p and http://plain/host",
        ),
        ("https://host/v1?api_key=abc123&model=m", "https://host/v1?api_key=[redacted]&model=m"),
        (
            "https://host/v1?x=1&ACCESS_TOKEN=zz#frag",
            "https://host/v1?x=1&ACCESS_TOKEN=[redacted]#frag",
        ),
        ("mail alice@example.com at http://host/a@b", "mail alice@example.com at http://host/a@b"),
        ("no url here: key=value", "no url here: key=value"),
    ],
)
def test_redact_removes_url_credentials_and_nothing_else(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_redact_replaces_configured_secrets_longest_first_and_ignores_short_ones() -> None:
    text = "key sk-abcdef-long and sk-abcdef and x"
    assert redact(text, ["sk-abcdef", "sk-abcdef-long", "x", ""]) == (
        f"key {REDACTED} and {REDACTED} and x"
    )


def test_provider_failure_messages_carry_no_url_credentials() -> None:
    line = clean("Connection to http://me:hunter22@10.0.0.1/v1 failed\n  retry", ["unrelated"])
    assert line == "Connection to http://[redacted]@10.0.0.1/v1 failed retry"


@pytest.fixture
def logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    parent = logging.getLogger("redact-test")
    parent.addHandler(handler)
    parent.setLevel(logging.INFO)
    parent.propagate = False
    try:
        yield parent, out
    finally:
        parent.removeHandler(handler)


def test_the_filter_redacts_messages_arguments_and_tracebacks_of_child_loggers(
    logger: tuple[logging.Logger, io.StringIO],
) -> None:
    parent, out = logger
    installed = redact_logs(["provider-key-123"], logger=parent)
    # A library's record, logged on a child logger, with the URL as an argument.
    child = logging.getLogger("redact-test.httpx")
    child.info('HTTP Request: %s %s "%s"', "POST", "http://u:pw1234@h/v1/chat", "HTTP/1.1 200 OK")
    try:
        raise ConnectionError("cannot reach http://u:pw1234@h/v1 with provider-key-123")
    except ConnectionError:
        child.exception("failed")
    text = out.getvalue()
    assert "pw1234" not in text and "provider-key-123" not in text
    assert 'HTTP Request: POST http://[redacted]@h/v1/chat "HTTP/1.1 200 OK"' in text
    assert "ConnectionError: cannot reach http://[redacted]@h/v1 with [redacted]" in text
    # Installing again updates the one filter rather than stacking a second.
    again = redact_logs(["other-secret"], logger=parent)
    assert again is installed and again.secrets == frozenset({"other-secret"})
    [ours] = [h for h in parent.handlers if getattr(h, "stream", None) is out]
    assert sum(isinstance(f, RedactingFilter) for f in ours.filters) == 1


def test_the_filter_never_drops_a_record_even_a_malformed_one(
    logger: tuple[logging.Logger, io.StringIO],
) -> None:
    parent, _ = logger
    record = parent.makeRecord("x", logging.INFO, __file__, 1, "%s %s", ("one",), None)
    assert RedactingFilter().filter(record) is True
