"""The one duration grammar (recursa.duration) and its pydantic type."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from recursa.duration import Duration, format_duration, is_bare_number, parse_duration


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (90, 90.0),
        (2.5, 2.5),
        ("90", 90.0),
        ("2.5", 2.5),
        ("90s", 90.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("2d", 172_800.0),
        ("1h30m", 5400.0),
        ("1d 12h", 129_600.0),
        ("1.5h", 5400.0),
        (" 2 Hours ", 7200.0),
        ("90 seconds", 90.0),
        ("5 min", 300.0),
        ("0", 0.0),
    ],
)
def test_every_form_reads_as_seconds(given: object, seconds: float) -> None:
    assert parse_duration(given) == seconds


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (True, "a duration is 90s, 10m, 1h30m, 2d or a number of seconds, not True"),
        (None, "not None"),
        ([60], r"not \[60\]"),
        ("soon", "cannot read the duration 'soon'"),
        ("10 parsecs", "cannot read the duration"),
        ("1h 30", "cannot read the duration"),
        ("-3m", "cannot read the duration"),
        ("", "a duration is missing"),
        (-1, "cannot be negative"),
        (float("inf"), "must be finite"),
        (float("nan"), "must be finite"),
        ("9" * 400, "at most 100 characters"),
    ],
)
def test_what_is_not_a_duration_is_one_line(given: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_duration(given)
    assert "\n" not in str(info.value)


def test_formatting_and_bare_numbers() -> None:
    assert format_duration(90061) == "1d1h1m1s"
    assert format_duration(5400.0) == "1h30m"
    assert format_duration(0.2) == "0s"
    assert parse_duration(format_duration(93_784)) == 93_784
    assert is_bare_number(" 10 ") and not is_bare_number("10m")


class Limits(BaseModel):
    limit: Duration = 0.0
    cap: Duration | None = None


def test_the_pydantic_type_accepts_the_same_grammar() -> None:
    assert Limits.model_validate({"limit": "1h30m", "cap": 5}).model_dump() == {
        "limit": 5400.0,
        "cap": 5.0,
    }
    assert Limits.model_validate_json('{"limit": "2d"}').limit == 172_800.0
    with pytest.raises(ValidationError, match="cannot read the duration 'soon'"):
        Limits.model_validate({"limit": "soon"})
    with pytest.raises(ValidationError, match="not True"):
        Limits.model_validate({"limit": True})
    schema = Limits.model_json_schema()["properties"]["limit"]
    assert {"type": "number", "minimum": 0} in schema["anyOf"]
