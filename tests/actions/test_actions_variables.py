"""``{{NAME}}`` substitution and the built-in variables (broker.actions.variables)."""

from __future__ import annotations

import datetime as dt
import string
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from broker.actions.variables import builtin_variables, format_datetime, names_in, substitute

NAMES = st.text(alphabet=string.ascii_letters + string.digits + "_-.", min_size=1, max_size=12)
# Literal text that cannot form a reference by itself (no braces at all).
LITERALS = st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=20)
VALUES = st.text(max_size=20)  # anything, "{{X}}" included


def test_builtins_are_amps_forms() -> None:
    now = dt.datetime(2026, 11, 23, 20, 15, 0, 250000, tzinfo=ZoneInfo("America/New_York"))
    assert builtin_variables("ops-1", now) == {
        "AMPS_INSTANCE_NAME": "ops-1",
        "AMPS_DATETIME": "20261124T011500.250000Z",  # UTC, ISO 8601 basic form as AMPS writes timestamps
        "AMPS_UNIX_TIMESTAMP": "1795482900",
    }
    assert format_datetime(dt.datetime(2024, 2, 29, 23, 59, 59)) == "20240229T235959.000000Z"  # naive = UTC


def test_substitution_rules() -> None:
    variables = {"AGE": "12h", "my-param": "x", "EMPTY": ""}
    assert substitute("Age {{AGE}} / {{ AGE }} / {{my-param}}", variables) == "Age 12h / 12h / x"
    assert substitute("[{{EMPTY}}]", variables) == "[]"
    missing: list[str] = []
    assert substitute("a{{NOPE}}b{{age}}c", variables, missing) == "abc"  # undefined -> "", case-sensitive
    assert missing == ["NOPE", "age"]
    assert substitute("{{AMPS_BYTE_01}}|{{AMPS_BYTE_3D}}|{{AMPS_BYTE_3d}}", {}) == "\x01|=|="
    assert substitute("{{}} {{a b}} {single} }}{{", variables) == "{{}} {{a b}} {single} }}{{"  # not references
    assert names_in("{{A}} and {{ B }} and {{A}}") == ["A", "B", "A"]


@given(st.lists(st.tuples(LITERALS, NAMES), max_size=6), LITERALS, st.dictionaries(NAMES, VALUES))
def test_substitution_is_one_pass_concatenation(parts: list[tuple[str, str]], tail: str,
                                                variables: dict[str, str]) -> None:
    """Literal text passes through; each reference becomes its value (never expanded again), else ""."""
    template = "".join(f"{literal}{{{{{name}}}}}" for literal, name in parts) + tail
    missing: list[str] = []
    got = substitute(template, variables, missing)

    def value(name: str) -> str:
        if name in variables:
            return variables[name]
        if len(name) == 13 and name.startswith("AMPS_BYTE_") and all(c in string.hexdigits for c in name[10:]):
            return chr(int(name[10:], 16))  # pragma: no cover - hypothesis rarely draws these
        return ""

    assert got == "".join(literal + value(name) for literal, name in parts) + tail
    assert missing == [name for _literal, name in parts if value(name) == "" and name not in variables]


@given(st.text(alphabet=st.characters(blacklist_characters="{"), max_size=50), st.dictionaries(NAMES, VALUES))
def test_text_without_references_is_unchanged(text: str, variables: dict[str, str]) -> None:
    assert substitute(text, variables) == text
