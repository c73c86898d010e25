"""A table of filters with hand-derived expected values (the comment on each row says why).

Each row is checked twice: ``Filter.evaluate`` must give the three-valued result (True / False / None
for unknown) and ``Filter(message)`` must be True exactly when that result is True.
"""

from __future__ import annotations

import orjson
import pytest

from broker.expr import compile_filter
from broker.messagetypes import get_message_type

DOC = {
    "region": "EU",
    "qty": 150,
    "price": 99.5,
    "name": "Widget",
    "s47": "47",
    "empty": "",
    "nul": None,
    "flag": True,
    "off": False,
    "data": [1, 2, 3, "zebra", 5],
    "other": [14, 34, 23, 5],
    "none_arr": [],
    "nested": {"a": {"b": 7}},
    "lines": [{"q": 1}, {"q": 2}],
    "text": "  padded  ",
    "mixed": "Hello World",
    "ts": "2.000",
    "neg": -7,
    "zero": 0,
    "word_true": "TRUE",
    "my field": 3,
}

XML = b"""<Order update="full" xmlns:x="urn:x">
  <ClientID>12345</ClientID>
  <Symbol>IBM</Symbol>
  <OrderQty>1000</OrderQty>
  <Px>90.25</Px>
  <Empty/>
  <Leg><Qty>1</Qty></Leg>
  <Leg><Qty>5</Qty></Leg>
  <x:Tagged x:kind="ns">yes</x:Tagged>
</Order>"""

JSON_CASES = [
    # -- equality and inequality ------------------------------------------------------------------
    ("/region = 'EU'", True),  # plain string equality
    ('/region = "EU"', True),  # double quotes are strings too
    ("/region == 'EU'", True),  # == is the same operator as =
    ("/region = 'eu'", False),  # case-sensitive
    ("/region != 'EU'", False),
    ("/region <> 'US'", True),  # <> is !=
    ("/qty = 150", True),
    ("/qty = 150.0", True),  # 2 = 2.0: numeric comparison
    ("/qty != 150", False),
    # -- ordering ---------------------------------------------------------------------------------
    ("/qty > 100", True),
    ("/qty >= 150", True),
    ("/qty < 150", False),
    ("/qty <= 149.9", False),
    ("/price < 100", True),
    ("/name > 'Apple'", True),  # 'W' > 'A'
    ("/name < 'apple'", True),  # upper case sorts before lower case (code points)
    # -- numeric strings and type conversion (AMPS "Comparison Operators") ----------------------------
    ("/s47 = 47", True),  # '47' converts to 47 against a number
    ("/s47 > 5", True),  # numeric, not '47' > '5' as text (which would also be False... see next)
    ("/s47 > '5'", False),  # both strings: '4' < '5' lexicographically
    ("10 < '2'", False),  # '2' converts to 2
    ("'2.000' <> '2.0'", True),  # two strings: no conversion
    ("/ts = 2", True),  # '2.000' converts to 2
    ("/ts = '2'", False),  # string vs string
    ("10 < 'Crank It Up'", True),  # non-numeric strings are greater than numbers
    ("/name > 1000000", True),  # same rule with a field
    ("/name = 5", False),  # a non-numeric string never equals a number
    ("/name != 5", True),
    # -- booleans ------------------------------------------------------------------------------------
    ("/flag = TRUE", True),
    ("/flag = true", True),  # keywords are case-insensitive
    ("/flag = 1", True),  # true is 1
    ("/off = 0", True),  # false is 0
    ("/flag = 'true'", True),  # a boolean against 'true'/'false' text compares as booleans
    ("/off = 'FALSE'", True),
    ("/flag = FALSE", False),
    ("/flag", True),  # a boolean field used as a condition
    ("/off", False),
    ("/word_true", True),  # the string 'TRUE' used as a condition
    ("/qty", True),  # non-zero number used as a condition
    ("/zero", False),
    ("/name", None),  # a non-numeric string is not a truth value: unknown
    # -- NULL: missing field, JSON null, empty string --------------------------------------------------
    ("/missing = 1", None),  # comparison with NULL is unknown
    ("/missing != 1", None),
    ("/nul = NULL", None),  # NULL = NULL is unknown too
    ("NULL = NULL", None),
    ("/missing IS NULL", True),
    ("/nul IS NULL", True),  # JSON null is NULL
    ("/empty IS NULL", True),  # an empty string is NULL
    ("/empty = ''", None),  # '' = '' is unknown: both are NULL
    ("'' IS NULL", True),
    ("10 < ''", None),
    ("10 > ''", None),
    ("/region IS NOT NULL", True),
    ("/none_arr IS NULL", True),  # an empty array is NULL
    ("/nested IS NULL", False),  # a nested object is present
    ("/nested = 1", None),  # ...but has no comparable value
    # -- three-valued logic -------------------------------------------------------------------------------
    ("NOT /missing = 1", None),  # NOT unknown is unknown
    ("/missing = 1 AND /qty > 0", None),  # unknown AND true
    ("/missing = 1 AND /qty < 0", False),  # unknown AND false
    ("/missing = 1 OR /qty > 0", True),  # unknown OR true
    ("/missing = 1 OR /qty < 0", None),  # unknown OR false
    ("NOT (/missing = 1 OR /qty > 0)", False),
    ("NOT /region = 'US'", True),
    ("not /region = 'EU'", False),
    # -- precedence: NOT > AND > OR; arithmetic above comparison ------------------------------------------
    ("/qty = 1 OR /qty = 150 AND /region = 'US'", False),  # = 1 OR (150 AND US) -> F OR F
    ("(/qty = 1 OR /qty = 150) AND /region = 'US'", False),
    ("/qty = 150 OR /qty = 1 AND /region = 'US'", True),  # T OR (...)
    ("NOT /qty = 1 AND /region = 'EU'", True),  # (NOT F) AND T
    ("NOT (/qty = 150 AND /region = 'EU')", False),
    ("/qty - 50 * 2 = 50", True),  # 150 - (50*2)
    ("(/qty - 50) * 2 = 200", True),
    ("/qty / 3 = 50", True),
    ("/qty % 7 = 3", True),  # 150 = 21*7 + 3
    ("( /qty % 3 ) == 0", True),  # the AMPS documentation example
    ("-/qty = -150", True),  # unary minus
    ("- -/qty = 150", True),
    ("2 + 3 * 4 = 14", True),
    ("/neg % 4 = -3", True),  # remainder takes the dividend's sign
    ("/qty / 0 IS NULL", True),  # division by zero is NULL
    ("/missing + 1 IS NULL", True),  # arithmetic on NULL is NULL
    ("/s47 + 1 = 48", True),  # numeric text takes part in arithmetic
    ("/name + 1 IS NULL", True),  # non-numeric text gives NULL
    ("/price * 2 = 199", True),
    # -- IN ----------------------------------------------------------------------------------------------
    ("/region IN ('US', 'EU')", True),
    ("/region IN ('US', 'JP')", False),
    ("/region NOT IN ('US', 'JP')", True),
    ("/qty IN (1, 150)", True),
    ("/s47 IN (47, 48)", True),  # numeric text against numbers
    ("/region IN ('US', NULL)", None),  # no match, and a NULL in the list: unknown
    ("/region IN ('EU', NULL)", True),
    ("/missing IN (1, 2)", None),
    ("/missing NOT IN (1, 2)", None),
    # -- BETWEEN (inclusive) ---------------------------------------------------------------------------
    ("/qty BETWEEN 100 AND 200", True),
    ("/qty BETWEEN 150 AND 150", True),
    ("/qty BETWEEN 151 AND 200", False),
    ("/qty NOT BETWEEN 151 AND 200", True),
    ("/missing BETWEEN 1 AND 2", None),
    ("/qty BETWEEN 100 AND 200 AND /region = 'EU'", True),  # BETWEEN's AND binds first
    # -- LIKE: PCRE-style regular expressions, unanchored, case-sensitive -----------------------------------
    ("/name LIKE 'idg'", True),  # a substring match: LIKE is not anchored
    ("/name LIKE '^W.*t$'", True),
    ("/name LIKE '^w'", False),
    ("/name LIKE '(?i)^w'", True),  # (?i) switches on case-insensitive matching
    ("/name NOT LIKE 'xyz'", True),
    ("/name LIKE '\\bWid'", True),  # word boundary (back-references are a bad filter: RE2, docs/filters.md)
    ("/mixed LIKE '(l)+o'", True),  # 'llo' in 'Hello'
    ("/price LIKE '^99\\.5$'", True),  # numbers are matched as their text
    ("/missing LIKE 'a'", None),
    ("/mixed LIKE 'o W'", True),
    # -- BEGINS WITH / ENDS WITH ------------------------------------------------------------------------
    ("/name BEGINS WITH ('Wid')", True),
    ("/name BEGINS WITH ('x', 'W')", True),  # any of the set
    ("/name NOT BEGINS WITH ('Wid')", False),
    ("/name ENDS WITH ('get', 'zzz')", True),
    ("/name ENDS WITH ('Wid')", False),
    # -- arrays: comparisons are true when any element matches; arithmetic uses the first ------------------
    ("/data = 1", True),
    ("/data = 'zebra'", True),
    ("/data != 'zebra'", True),  # some element is not 'zebra'
    ("/data = 42", False),
    ("/data LIKE 'z'", True),
    ("/other > 30", True),
    ("/other > 50", False),
    ("/data[0] = 1", True),  # subscripts are 0-based
    ('/data[3] = "zebra"', True),
    ("/data[1] != 1", True),
    ("/other[1] LIKE '4'", True),  # 34
    ("/data = /other", True),  # 5 is in both
    ("/data IN (42, 'zebra')", True),
    ("/other + 1 = 15", True),  # arithmetic uses the first element, 14
    ("/data[9] IS NULL", True),  # out of range
    ("/lines/q = 2", True),  # a step through an array of objects collects the values
    ("/lines/q > 5", False),
    ("/none_arr = 1", None),  # an empty array is NULL
    # -- nested objects ------------------------------------------------------------------------------------
    ("/nested/a/b = 7", True),
    ("/nested/a/c IS NULL", True),
    ("[/my field] = 3", True),  # the bracketed form allows names that are not XPath names
    # -- functions ---------------------------------------------------------------------------------------
    ("UPPER(/region) = 'EU'", True),
    ("upper(/name) = 'WIDGET'", True),  # function names are case-insensitive
    ("LOWER(/name) IN ('widget', 'gadget')", True),
    ("LENGTH(/name) = 6", True),
    ("LENGTH(/missing) IS NULL", True),
    ("CONCAT(/region, '-', /qty) = 'EU-150'", True),
    ("CONCAT(/missing, 'x') = 'x'", True),  # NULL arguments contribute nothing
    ("SUBSTR(/name, 1, 3) = 'Wid'", True),  # 1-based
    ("SUBSTR(/name, 4) = 'get'", True),  # to the end
    ("SUBSTR(/name, -3) = 'get'", True),  # negative positions count from the end
    ("INSTR(/mixed, 'World') = 7", True),  # 1-based position
    ("INSTR(/mixed, 'nope') = 0", True),
    ("INSTR_I(/mixed, 'world') = 7", True),
    ("STREQUAL_I(/name, 'WIDGET') = 1", True),  # true is 1
    ("COALESCE(/missing, /nul, /region) = 'EU'", True),
    ("COALESCE(/empty, 'd') = 'd'", True),  # '' is NULL
    ("ABS(/neg) = 7", True),
    ("ROUND(/price) = 100", True),  # half away from zero
    ("ROUND(2.5) = 3", True),
    ("ROUND(-2.5) = -3", True),
    ("ROUND(/price, 0) = 100", True),
    ("ROUND(1.2345, 2) = 1.23", True),
    ("CEILING(/price) = 100", True),
    ("FLOOR(/price) = 99", True),
    ("TRIM(/text) = 'padded'", True),
    ("LTRIM(/text) = 'padded  '", True),
    ("RTRIM(/text) = '  padded'", True),
    ("REPLACE(/mixed, 'World', 'There') = 'Hello There'", True),
    ("NOW() > 1600000000", True),  # epoch seconds
    ("UNIX_TIMESTAMP() > 1600000000", True),
    ("IF(/qty > 100, 'big', 'small') = 'big'", True),
    ("IF(/missing > 100, 'big', 'small') = 'small'", True),  # unknown condition takes the else branch
    ("IS_NULL(/missing)", True),
    # -- literals ----------------------------------------------------------------------------------------
    ("1.5e2 = /qty", True),  # exponent notation
    (".5 = 0.5", True),
    ("'it''s' = \"it's\"", True),  # a doubled quote inside a string
    ("'a\\'b' = \"a'b\"", True),  # a backslash-escaped quote
    ("'\\x41' = 'A'", True),  # \xHH escapes
]


@pytest.fixture(scope="module")
def json_message():
    return get_message_type("json").parse(orjson.dumps(DOC))


def test_table_is_large_enough() -> None:
    assert len(JSON_CASES) >= 60
    assert len({text for text, _ in JSON_CASES}) == len(JSON_CASES), "duplicate rows"


@pytest.mark.parametrize(("text", "expected"), JSON_CASES, ids=[t for t, _ in JSON_CASES])
def test_json_filter(json_message, text: str, expected: bool | None) -> None:
    flt = compile_filter(text)
    assert flt.evaluate(json_message) is expected
    assert flt(json_message) is (expected is True)
    assert flt.match(json_message) is (expected is True)


XML_CASES = [
    ("/Order/Symbol = 'IBM'", True),  # the root element is part of the path
    ("/Symbol = 'IBM'", None),  # without the root the field is missing
    ("/Order/@update = 'full'", True),  # attribute
    ("/Order/OrderQty > 500", True),  # XML text converts to a number against a number
    ("/Order/OrderQty = '1000'", True),
    ("/Order/Px LIKE '^90\\..*' AND /Order/Px < 91.0", True),  # AMPS regular-expression example
    ("/Order/Empty IS NULL", True),  # an empty element is NULL
    ("/Order/Leg/Qty = 5", True),  # repeated elements: any
    ("/Order/Leg[0]/Qty = 5", False),
    ("/Order/Leg[1]/Qty = 5", True),
    ("/Order/Tagged = 'yes'", True),  # namespaces are ignored: local names match
    ("/Order/Tagged/@kind = 'ns'", True),
    ("/Order IS NULL", True),  # a compound element has no scalar value
    ("/Order/ClientID BETWEEN 10000 AND 20000", True),
]


@pytest.mark.parametrize(("text", "expected"), XML_CASES, ids=[t for t, _ in XML_CASES])
def test_xml_filter(text: str, expected: bool | None) -> None:
    message = get_message_type("xml").parse(XML)
    flt = compile_filter(text)
    assert flt.evaluate(message) is expected
    assert flt(message) is (expected is True)


def test_seed_buyer_example_and_oof_transition() -> None:
    """The OOF chapter's buyer topic: /buyer/loc="NY" matches the first state, not the update."""
    xml = get_message_type("xml")
    flt = compile_filter('/buyer/loc="NY"')
    assert flt(xml.parse(b"<buyer><id>100</id><loc>NY</loc></buyer>"))
    assert not flt(xml.parse(b"<buyer><id>100</id><loc>LN</loc></buyer>"))


def test_seed_client_state_example() -> None:
    flt = compile_filter('/Client = "Adam" AND /State = "Open"')
    json = get_message_type("json")
    assert flt(json.parse(b'{"Client":"Adam","State":"Open","Sym":"MSFT"}'))
    assert not flt(json.parse(b'{"Client":"Adam","State":"Filled","Sym":"MSFT"}'))


def test_binary_messages_have_no_fields() -> None:
    message = get_message_type("binary").parse(b"\x00\x01/region=EU")
    assert compile_filter("/region IS NULL")(message)
    assert not compile_filter("/region = 'EU'")(message)


def test_broken_lazy_message_never_matches() -> None:
    message = get_message_type("json").lazy(b"{not json")
    assert compile_filter("/a IS NULL")(message)
    assert not compile_filter("/a = 1")(message)
    assert message.error
