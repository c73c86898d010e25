"""``Every`` parsing and next_fire with fixed times: midnight, month/year ends, leap day, both DST changes."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from broker.actions.schedule import Schedule, next_fire, parse_schedule

NY = ZoneInfo("America/New_York")  # 2024: clocks forward Mar 10 02:00 -> 03:00, back Nov 3 02:00 -> 01:00
LONDON = ZoneInfo("Europe/London")  # 2024: forward Mar 31 01:00 -> 02:00, back Oct 27 02:00 -> 01:00
UTC = dt.UTC


def at(zone: dt.tzinfo, *args: int, fold: int = 0) -> dt.datetime:
    return dt.datetime(*args, tzinfo=zone, fold=fold)


def utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(UTC)


# -- parsing ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("10s", Schedule("10s", interval=10.0)),
    (" 4h ", Schedule("4h", interval=4 * 3600.0)),
    ("1d", Schedule("1d", interval=86400.0)),
    ("02:30", Schedule("02:30", time=dt.time(2, 30))),
    ("7:05", Schedule("7:05", time=dt.time(7, 5))),
    ("11:32Z", Schedule("11:32Z", time=dt.time(11, 32), utc=True)),
    ("Saturday at 00:30", Schedule("Saturday at 00:30", time=dt.time(0, 30), weekday=5)),
    ("wednesday AT 03:32", Schedule("wednesday AT 03:32", time=dt.time(3, 32), weekday=2)),
    ("Saturday at 11:00Z", Schedule("Saturday at 11:00Z", time=dt.time(11), weekday=5, utc=True)),
])  # fmt: skip
def test_the_three_forms(text: str, expected: Schedule) -> None:
    assert parse_schedule(text) == expected


@pytest.mark.parametrize(("text", "says"), [
    ("", "Every is empty: write an interval"),
    ("soon", "'soon' is not a schedule: write an interval (10s, 15m, 4h, 1d), a daily time (HH:MM"),
    ("10", "'10' is not a schedule"),
    ("0s", "a timer must be longer than zero"),
    ("25:00", "25:00 is not a time of day (24-hour clock, 00:00 to 23:59)"),
    ("12:60", "12:60 is not a time of day"),
    ("02:30:15", "seconds are not accepted in a clock time; write HH:MM"),
    ("Sat at 11:00", "'Sat' is not a weekday (did you mean Saturday?); write the full name"),
    ("Funday at 11:00", "'Funday' is not a weekday; write the full name, one of Monday, Tuesday"),
    ("Saturday 11:00", "is not a schedule"),
])  # fmt: skip
def test_bad_values_say_what_to_write(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        parse_schedule(text)
    assert says in str(caught.value)


def test_describe() -> None:
    assert parse_schedule("10s").describe() == "every 10s"
    assert parse_schedule("02:30").describe() == "daily at 02:30 local time"
    assert parse_schedule("saturday at 00:30Z").describe() == "Saturdays at 00:30 UTC"


# -- next_fire ---------------------------------------------------------------------------------------------

def test_daily_across_midnight_month_year_and_leap_day() -> None:
    s = parse_schedule("00:15")
    assert next_fire(s, at(NY, 2024, 5, 6, 23, 59)) == at(NY, 2024, 5, 7, 0, 15)
    assert next_fire(s, at(NY, 2024, 5, 7, 0, 15)) == at(NY, 2024, 5, 8, 0, 15)  # strictly after
    assert next_fire(s, at(NY, 2024, 5, 7, 0, 14, 59)) == at(NY, 2024, 5, 7, 0, 15)
    assert next_fire(s, at(NY, 2024, 1, 31, 12, 0)) == at(NY, 2024, 2, 1, 0, 15)  # month end
    assert next_fire(s, at(NY, 2024, 12, 31, 23, 0)) == at(NY, 2025, 1, 1, 0, 15)  # year end
    assert next_fire(s, at(NY, 2024, 2, 28, 12, 0)) == at(NY, 2024, 2, 29, 0, 15)  # leap day
    assert next_fire(s, at(NY, 2023, 2, 28, 12, 0)) == at(NY, 2023, 3, 1, 0, 15)  # no leap day


def test_weekly() -> None:
    s = parse_schedule("Thursday at 10:00")
    assert next_fire(s, at(LONDON, 2024, 2, 27, 9, 0)) == at(LONDON, 2024, 2, 29, 10, 0)  # a leap-day Thursday
    assert next_fire(s, at(LONDON, 2024, 2, 29, 10, 0)) == at(LONDON, 2024, 3, 7, 10, 0)
    assert next_fire(s, at(LONDON, 2024, 2, 29, 9, 59)) == at(LONDON, 2024, 2, 29, 10, 0)
    monday = parse_schedule("Monday at 09:00")
    assert next_fire(monday, at(NY, 2024, 12, 31, 8, 0)) == at(NY, 2025, 1, 6, 9, 0)  # across the year


def test_utc_times_ignore_the_local_zone() -> None:
    s = parse_schedule("11:32Z")
    got = next_fire(s, at(NY, 2024, 3, 10, 1, 0))  # 06:00 UTC, the night New York springs forward
    assert got == dt.datetime(2024, 3, 10, 11, 32, tzinfo=UTC)
    assert next_fire(s, got) == dt.datetime(2024, 3, 11, 11, 32, tzinfo=UTC)
    weekly = parse_schedule("Sunday at 00:30Z")
    # Saturday 18:00 in New York is 23:00 UTC: Sunday 00:30 UTC is an hour and a half away.
    assert next_fire(weekly, at(NY, 2024, 3, 9, 18, 0)) == dt.datetime(2024, 3, 10, 0, 30, tzinfo=UTC)
    assert next_fire(weekly, at(NY, 2024, 3, 9, 20, 0)) == dt.datetime(2024, 3, 17, 0, 30, tzinfo=UTC)


def test_timer_adds_elapsed_time_even_across_a_clock_change() -> None:
    s = parse_schedule("10s")
    got = next_fire(s, at(NY, 2024, 3, 10, 1, 59, 55))
    assert utc(got) == utc(at(NY, 2024, 3, 10, 1, 59, 55)) + dt.timedelta(seconds=10)
    assert (got.hour, got.minute, got.second) == (3, 0, 5)  # the wall clock jumped meanwhile


def test_spring_forward_a_skipped_time_fires_when_the_clocks_jump() -> None:
    s = parse_schedule("02:30")  # does not exist in New York on 2024-03-10
    got = next_fire(s, at(NY, 2024, 3, 9, 12, 0))
    assert got == at(NY, 2024, 3, 10, 3, 0) and utc(got) == dt.datetime(2024, 3, 10, 7, 0, tzinfo=UTC)
    assert next_fire(s, got) == at(NY, 2024, 3, 11, 2, 30)  # and only once
    london = parse_schedule("01:30")  # does not exist in London on 2024-03-31
    got = next_fire(london, at(LONDON, 2024, 3, 30, 23, 0))
    assert utc(got) == dt.datetime(2024, 3, 31, 1, 0, tzinfo=UTC) and (got.hour, got.minute) == (2, 0)
    # A time just before the gap is untouched.
    assert utc(next_fire(parse_schedule("01:59"), at(NY, 2024, 3, 10, 0, 0))) == dt.datetime(
        2024, 3, 10, 6, 59, tzinfo=UTC)


def test_fall_back_a_repeated_time_fires_once_at_its_first_occurrence() -> None:
    s = parse_schedule("01:30")  # 01:30 happens twice in New York on 2024-11-03
    first = next_fire(s, at(NY, 2024, 11, 2, 12, 0))
    assert utc(first) == dt.datetime(2024, 11, 3, 5, 30, tzinfo=UTC)  # 01:30 EDT
    assert next_fire(s, first) == at(NY, 2024, 11, 4, 1, 30)  # not 01:30 EST an hour later
    # Asked between the two occurrences (01:10 EST, after 01:30 EDT has passed): tomorrow.
    between = at(NY, 2024, 11, 3, 1, 10, fold=1)
    assert utc(between) == dt.datetime(2024, 11, 3, 6, 10, tzinfo=UTC)
    assert next_fire(s, between) == at(NY, 2024, 11, 4, 1, 30)
    london = parse_schedule("Sunday at 01:30")  # 01:30 happens twice in London on 2024-10-27
    got = next_fire(london, at(LONDON, 2024, 10, 26, 12, 0))
    assert utc(got) == dt.datetime(2024, 10, 27, 0, 30, tzinfo=UTC)  # 01:30 BST
    assert next_fire(london, got) == at(LONDON, 2024, 11, 3, 1, 30)


@pytest.mark.parametrize("zone", [NY, LONDON, ZoneInfo("Australia/Lord_Howe"), UTC], ids=str)
@pytest.mark.parametrize("clock", ["00:00", "00:30", "01:30", "02:00", "02:30", "23:59"])
def test_a_daily_schedule_fires_exactly_once_every_day_for_two_years(zone: dt.tzinfo, clock: str) -> None:
    """Lord Howe's clocks move by half an hour, which also exercises gaps that are not whole hours."""
    s = parse_schedule(clock)
    wanted = dt.time.fromisoformat(clock)
    when = next_fire(s, at(zone, 2023, 12, 31, 0, 0))
    for _ in range(2 * 366):
        nxt = next_fire(s, when)
        assert utc(nxt) > utc(when)
        local, before = nxt.astimezone(zone), when.astimezone(zone)
        assert local.date() == before.date() + dt.timedelta(days=1), (when, nxt)
        if local.time() != wanted:  # only when the clocks jumped over the wanted time that day
            wall = dt.datetime.combine(local.date(), wanted)
            assert utc(wall.replace(tzinfo=zone)).astimezone(zone).replace(tzinfo=None) != wall  # skipped
            a_minute_earlier = (utc(nxt) - dt.timedelta(minutes=1)).astimezone(zone)
            assert a_minute_earlier.time() < wanted < local.time()  # fired at the jump over it
        when = nxt


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire(parse_schedule("02:30"), dt.datetime(2024, 1, 1))
