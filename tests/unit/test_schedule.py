"""Schedules as pure decisions: parsing specs, next ticks, and coalescing the
ticks a stopped daemon missed. Times are plain numbers (an injected clock);
cron is evaluated in UTC so the tests do not depend on the machine."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from recursa.control.schedule import (
    MAX_MISSED_COUNT,
    Spec,
    advance,
    check_label,
    check_mode,
    describe,
    duration,
    first_at,
    format_duration,
    next_cron,
    parse,
)

HOUR = 3600.0


def at(text: str) -> float:
    """Unix seconds of an ISO time in UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "kind", "canonical", "seconds"),
    [
        ("every 10m", "every", "every 10m", 600.0),
        ("  Every   1h30m ", "every", "every 1h30m", 5400.0),
        ("every 2 hours", "every", "every 2h", 7200.0),
        ("every 90 seconds", "every", "every 1m30s", 90.0),
        ("every 1d", "every", "every 1d", 86_400.0),
        ("in 30m", "once", "in 30m", 1800.0),
        ("in 1.5h", "once", "in 1h30m", 5400.0),
    ],
)
def test_intervals_and_delays_parse_to_a_canonical_form(
    text: str, kind: str, canonical: str, seconds: float
) -> None:
    spec = parse(text)
    assert (spec.kind, spec.text, spec.seconds) == (kind, canonical, seconds)
    assert parse(spec.text) == spec  # the canonical form reads back the same


def test_cron_expressions_and_aliases_parse() -> None:
    assert parse("0 9 * * 1-5") == Spec("cron", "0 9 * * 1-5", cron="0 9 * * 1-5")
    assert parse("*/15   *  * * *").text == "*/15 * * * *"
    assert parse("@Daily").cron == "@daily"
    assert describe(parse("0 9 * * 1-5")) == "cron 0 9 * * 1-5"
    assert describe(parse("in 5m")) == "once"
    assert describe(parse("every 5m")) == "every 5m"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("every", "duration is missing"),
        ("every 10", "cannot read the duration"),
        ("every 10 parsecs", "cannot read the duration"),
        ("every 30s", "shortest interval is 1m"),
        ("in 0m", "shortest interval is 1m"),
        ("every 400d", "longest interval is 366d"),
        ("0 9 * *", "cron has five fields"),
        ("0 0 9 * * *", "cron has five fields"),
        ("61 * * * *", "not a valid cron expression"),
        ("@reboot", "unknown cron alias"),
        ("tomorrow", "not a schedule"),
        ("x" * 300, "longer than 200"),
    ],
)
def test_bad_specs_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse(text)
    assert "\n" not in str(caught.value)


def test_durations_accept_numbers_and_check_bounds() -> None:
    assert duration(600) == 600.0
    assert duration("10 minutes") == 600.0
    with pytest.raises(ValueError, match="shortest"):
        duration(5)
    with pytest.raises(ValueError, match="duration must be"):
        duration(True)
    assert format_duration(90061) == "1d1h1m1s"


def test_labels_and_modes_are_checked() -> None:
    assert check_label(None) is None
    assert check_label(" nightly ") == "nightly"
    with pytest.raises(ValueError, match="is a number"):
        check_label("42")
    with pytest.raises(ValueError, match="empty"):
        check_label("  ")
    assert check_mode("steer") == "steer"
    with pytest.raises(ValueError, match="steer or follow_up"):
        check_mode("auto")


def test_first_ticks() -> None:
    now = at("2025-01-03T08:00:00")  # a Friday
    assert first_at(parse("every 10m"), now) == now + 600
    assert first_at(parse("in 30m"), now) == now + 1800
    assert first_at(parse("0 9 * * 1-5"), now, tz=UTC) == at("2025-01-03T09:00:00")
    # Strictly after: at 09:00 exactly, the next weekday 09:00 is Monday's.
    assert next_cron("0 9 * * 1-5", at("2025-01-03T09:00:00"), tz=UTC) == at("2025-01-06T09:00:00")


def test_a_job_not_yet_due_does_not_tick() -> None:
    assert advance(parse("every 10m"), due_at=1000.0, now=999.0) is None


def test_an_interval_due_now_fires_once_and_keeps_its_phase() -> None:
    tick = advance(parse("every 10m"), due_at=1000.0, now=1000.0)
    assert tick is not None
    assert (tick.due_at, tick.missed, tick.next_at) == (1000.0, 0, 1600.0)


def test_missed_interval_ticks_coalesce_into_one() -> None:
    """The daemon was down for five hours: one tick, 29 missed, the next one
    the first after now on the job's own phase."""
    spec = parse("every 10m")
    now = 1000.0 + 5 * HOUR + 1
    tick = advance(spec, due_at=1000.0, now=now)
    assert tick is not None
    assert tick.missed == 30
    assert tick.next_at == 1000.0 + 31 * 600
    assert now < tick.next_at <= now + 600
    # Exactly on a later tick's time: that tick is the one delivered now.
    exact = advance(spec, due_at=1000.0, now=1000.0 + 3 * 600)
    assert exact is not None and (exact.missed, exact.next_at) == (3, 1000.0 + 4 * 600)


def test_a_one_time_job_fires_once_however_late() -> None:
    tick = advance(parse("in 30m"), due_at=1000.0, now=1000.0 + 48 * HOUR)
    assert tick is not None
    assert (tick.missed, tick.next_at) == (0, None)


def test_missed_cron_ticks_coalesce_and_the_next_is_after_now() -> None:
    spec = parse("0 9 * * 1-5")
    due = at("2025-01-03T09:00:00")  # Friday
    now = at("2025-01-08T12:00:00")  # the next Wednesday, noon: Mon, Tue, Wed 09:00 missed
    tick = advance(spec, due_at=due, now=now, tz=UTC)
    assert tick is not None
    assert tick.missed == 3
    assert tick.next_at == at("2025-01-09T09:00:00")


def test_counting_missed_cron_ticks_is_bounded() -> None:
    spec = parse("* * * * *")
    due = at("2025-01-01T00:00:00")
    now = due + 30 * 86_400  # a month of minutes
    tick = advance(spec, due_at=due, now=now, tz=UTC)
    assert tick is not None
    assert tick.missed == MAX_MISSED_COUNT
    assert tick.next_at == now + 60  # the next minute after now


def test_the_kernel_api_writes_seconds_the_parser_reads() -> None:
    from recursa.api.goals import _spec

    assert _spec(1_000_000, None, None) == "every 1000000s"
    assert _spec(None, None, 90.5) == "in 90.5s"
    assert parse(str(_spec(12 * 86400, None, None))).text
    with pytest.raises(ValueError, match="finite"):
        _spec(float("inf"), None, None)
