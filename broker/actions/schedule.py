"""``amps-action-on-schedule``'s ``Every``: when a scheduled action runs next.

Three forms, as AMPS documents them:

* **Timer**: an interval (``10s``, ``15m``, ``4h``, ``1d``). The timer starts when the broker starts; the
  action runs each time it expires, then the timer restarts.
* **Daily**: a 24-hour clock time ``HH:MM`` (``02:30``, ``17:47``; ``7:05`` is accepted too).
* **Weekly**: ``<Weekday> at HH:MM`` (``Saturday at 00:30``): a full English weekday name, any case.

Clock times are local time (the zone of the ``after`` time handed to :func:`next_fire`, the broker host's
zone at run time); a ``Z`` suffix means UTC (``11:32Z``, ``Saturday at 11:00Z``). Seconds are not
accepted in clock times, nor abbreviated weekday names, nor several days (use several ``<On>`` blocks).

Daylight-saving time (local times only; UTC never shifts):

* A time that does not exist on a day (the clocks jump over it: ``02:30`` on the night the clocks go
  forward in New York, 02:00 -> 03:00) fires once, at the moment the clocks jump (03:00 local time): the
  wall clock passed 02:30 then. This is also when it would have fired had the jump been a minute later.
* A time that occurs twice (``01:30`` on the night the clocks go back) fires once, at its first
  occurrence (still on summer time).

So a daily schedule fires exactly once each calendar day, and a weekly one once each week.

This module is pure (no trio, no clock of its own): :func:`next_fire` is a function of its arguments.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from broker.config.units import parse_interval

__all__ = ["WEEKDAYS", "Schedule", "next_fire", "parse_schedule"]

#: Weekday names, Monday first (``datetime.weekday()`` order).
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

_HINT = ("write an interval (10s, 15m, 4h, 1d), a daily time (HH:MM such as 02:30, local time; 02:30Z "
         "for UTC) or a weekly time (<Weekday> at HH:MM, such as Saturday at 00:30)")
_CLOCK = re.compile(r"(?P<h>\d{1,2}):(?P<m>\d{2})(?P<z>[Zz]?)")
_WEEKLY = re.compile(r"(?P<day>[A-Za-z]+)\s+at\s+(?P<time>\S+)", re.IGNORECASE)
#: The longest a clock change can hide a wall time for (Samoa skipped a whole day in 2011).
_MAX_GAP = dt.timedelta(days=1, hours=1)


@dataclass(frozen=True)
class Schedule:
    """A parsed ``Every``.

    Attributes:
        text: What was written.
        interval: Seconds between runs (timer form); ``None`` for clock forms.
        time: The clock time (daily and weekly forms).
        weekday: 0 = Monday .. 6 = Sunday (weekly form); ``None`` otherwise.
        utc: The clock time is UTC (``Z``) rather than local time.
    """

    text: str
    interval: float | None = None
    time: dt.time | None = None
    weekday: int | None = None
    utc: bool = False

    def describe(self) -> str:
        """One phrase for logs: ``every 10s``, ``daily at 02:30 local time``, ``Saturdays at 00:30 UTC``."""
        if self.interval is not None:
            return f"every {self.text.strip()}"
        assert self.time is not None
        zone = "UTC" if self.utc else "local time"
        when = "daily" if self.weekday is None else f"{WEEKDAYS[self.weekday]}s"
        return f"{when} at {self.time:%H:%M} {zone}"


def _clock(text: str, whole: str) -> tuple[dt.time, bool]:
    match = _CLOCK.fullmatch(text)
    if match is None:
        if re.fullmatch(r"\d{1,2}:\d{2}:\d{2}[Zz]?", text):
            raise ValueError(f"{whole!r}: seconds are not accepted in a clock time; write HH:MM (e.g. 02:30)")
        raise ValueError(f"{whole!r} is not a schedule: {_HINT}")
    hour, minute = int(match["h"]), int(match["m"])
    if hour > 23 or minute > 59:
        raise ValueError(f"{whole!r}: {text.rstrip('Zz')} is not a time of day (24-hour clock, 00:00 to 23:59)")
    return dt.time(hour, minute), bool(match["z"])


def parse_schedule(text: str) -> Schedule:
    """Parse an ``Every`` value.

    Raises:
        ValueError: ``text`` is not a schedule; the message says what to write.
    """
    whole = text.strip()
    if not whole:
        raise ValueError(f"Every is empty: {_HINT}")
    weekly = _WEEKLY.fullmatch(whole)
    if weekly is not None:
        day = weekly["day"].capitalize()
        if day not in WEEKDAYS:
            close = [d for d in WEEKDAYS if d.lower().startswith(day.lower()[:3])]
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(f"{whole!r}: {weekly['day']!r} is not a weekday{hint}; write the full name, "
                             f"one of {', '.join(WEEKDAYS)}")
        time, utc = _clock(weekly["time"], whole)
        return Schedule(whole, time=time, weekday=WEEKDAYS.index(day), utc=utc)
    if ":" in whole:
        time, utc = _clock(whole, whole)
        return Schedule(whole, time=time, utc=utc)
    try:
        seconds = parse_interval(whole)
    except ValueError:
        raise ValueError(f"{whole!r} is not a schedule: {_HINT}") from None
    if seconds <= 0:
        raise ValueError(f"{whole!r}: a timer must be longer than zero (e.g. 10s)")
    return Schedule(whole, interval=seconds)


def _exists(wall: dt.datetime, zone: dt.tzinfo) -> bool:
    """Whether the naive wall time ``wall`` is shown by clocks in ``zone`` at some instant."""
    aware = wall.replace(tzinfo=zone)
    return aware.astimezone(dt.UTC).astimezone(zone).replace(tzinfo=None) == wall


def _occurrence(day: dt.date, time: dt.time, zone: dt.tzinfo) -> dt.datetime:
    """The instant ``time`` is first shown on ``day`` in ``zone``, or the end of the gap that hides it."""
    wall = dt.datetime.combine(day, time)
    if _exists(wall, zone):
        return wall.replace(tzinfo=zone, fold=0)  # fold=0: the first of two occurrences
    # Skipped by a clock change: walk to the first wall minute that exists (the instant of the jump).
    step = dt.timedelta(minutes=1)
    probe = wall + step
    while not _exists(probe, zone):
        if probe - wall > _MAX_GAP:  # pragma: no cover - no zone has such a gap
            raise ValueError(f"{wall} does not exist in {zone} and no later time within a day does")
        probe += step
    return probe.replace(tzinfo=zone, fold=0)


def next_fire(schedule: Schedule, after: dt.datetime) -> dt.datetime:
    """The first time strictly after ``after`` at which ``schedule`` fires.

    Args:
        schedule: A parsed ``Every``.
        after: A timezone-aware time. Local clock times are read in its zone (pass a
            :class:`zoneinfo.ZoneInfo` time for daylight-saving changes to be handled).

    Returns:
        The next fire time, in ``after``'s zone (UTC for ``Z`` schedules).

    Raises:
        ValueError: ``after`` is naive.
    """
    if after.tzinfo is None:
        raise ValueError("next_fire needs a timezone-aware time")
    if schedule.interval is not None:  # elapsed time, not wall time: add in UTC
        return (after.astimezone(dt.UTC) + dt.timedelta(seconds=schedule.interval)).astimezone(after.tzinfo)
    assert schedule.time is not None
    zone: dt.tzinfo = dt.UTC if schedule.utc else after.tzinfo
    # Instants are compared in UTC: Python compares two times of the same zone by their wall clocks,
    # ignoring ``fold``, which would put the second 01:30 of a fall-back night before the first.
    instant = after.astimezone(dt.UTC)
    start = after.astimezone(zone).date() - dt.timedelta(days=1)  # a gap's end may fall on the next day
    for offset in range(9):
        day = start + dt.timedelta(days=offset)
        if schedule.weekday is not None and day.weekday() != schedule.weekday:
            continue
        candidate = _occurrence(day, schedule.time, zone)
        if candidate.astimezone(dt.UTC) > instant:
            return candidate
    raise AssertionError("unreachable: a weekly schedule fires within 8 days")  # pragma: no cover
