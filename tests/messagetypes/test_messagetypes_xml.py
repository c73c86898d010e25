"""The xml message type: lookups (root in the path, attributes, repeats), hardening, merge and diff."""

from __future__ import annotations

import pytest
from lxml import etree

from broker.messagetypes import MessageParseError, XmlMessage, get_message_type

XML = get_message_type("xml")

ORDER = b"""<?xml version="1.0" encoding="UTF-8"?>
<Order update="full" xmlns:f="urn:fix">
  <ClientID>12345</ClientID>
  <Symbol>IBM</Symbol>
  <Empty/>
  <Blank></Blank>
  <Space> </Space>
  <Leg side="B"><Qty>1</Qty></Leg>
  <Leg side="S"><Qty>5</Qty></Leg>
  <f:Instrmt f:Sym="MSFT">x</f:Instrmt>
  <!-- a comment -->
  <Text>caf\xc3\xa9</Text>
</Order>"""


@pytest.fixture
def order() -> XmlMessage:
    return XML.parse(ORDER)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/Order/ClientID", "12345"),  # XML values are text
        ("/Order/Symbol", "IBM"),
        ("/Order/@update", "full"),
        ("/Symbol", None),  # the root element is part of the path
        ("/Other/Symbol", None),
        ("/Order/Empty", None),  # <Empty/> is NULL
        ("/Order/Blank", None),
        ("/Order/Space", " "),
        ("/Order/Leg/Qty", ["1", "5"]),  # repeated elements give a list
        ("/Order/Leg/@side", ["B", "S"]),
        ("/Order/Leg[1]/Qty", "5"),
        ("/Order/Leg[2]/Qty", None),
        ("/Order/Leg", [None, None]),  # compound elements have no scalar value
        ("/Order", None),
        ("/Order/Instrmt", "x"),  # local names: the namespace prefix is ignored
        ("/Order/Instrmt/@Sym", "MSFT"),
        ("/Order/@missing", None),
        ("/Order/Text", "café"),
        ("/Order[0]/Symbol", "IBM"),
    ],
)
def test_get(order, path: str, expected) -> None:
    assert order.get(path) == expected


def test_document_is_the_root(order) -> None:
    assert order.document.tag == "Order"
    assert order.typed_values is False


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"<a>",
        b"<a></b>",
        b"not xml",
        b"<a/><b/>",
        b'<!DOCTYPE a [<!ENTITY e "boom">]><a>&e;</a>',  # entity definitions
        b'<!DOCTYPE a SYSTEM "http://example.invalid/a.dtd"><a/>',  # external DTD (network)
        b'<!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]><a>&x;</a>',  # XXE
    ],
)
def test_invalid_or_dangerous_xml_is_rejected(data: bytes) -> None:
    with pytest.raises(MessageParseError) as info:
        XML.parse(data)
    assert info.value.reason == "parse error"
    assert "xml" in info.value.detail


def test_billion_laughs_is_rejected_quickly() -> None:
    lol = (
        b'<!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
        + b"".join(f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">'.encode() for i in range(8))
        + b"]><l>&i;</l>"
    )
    with pytest.raises(MessageParseError):
        XML.parse(lol)


def test_lazy_broken_message() -> None:
    m = XML.lazy(b"<a><b>1</b>")
    assert m.get("/a/b") is None
    assert m.error


# -- merge ---------------------------------------------------------------------------------------------


def canon(data: bytes) -> bytes:
    return etree.tostring(etree.fromstring(data), method="c14n")


def test_merge_buyer_update() -> None:
    out = XML.merge(b"<buyer><id>100</id><loc>NY</loc></buyer>", b"<buyer><id>100</id><loc>LN</loc></buyer>")
    assert canon(out) == canon(b"<buyer><id>100</id><loc>LN</loc></buyer>")


def test_merge_nested_elements_and_attributes() -> None:
    base = b'<o a="1"><id>1</id><c><x>1</x><y>2</y></c></o>'
    delta = b'<o b="2"><c><y>3</y><z>4</z></c><new>n</new></o>'
    expected = b'<o a="1" b="2"><id>1</id><c><x>1</x><y>3</y><z>4</z></c><new>n</new></o>'
    assert canon(XML.merge(base, delta)) == canon(expected)


def test_merge_repeated_elements_are_replaced_whole() -> None:
    base = b"<o><id>1</id><l>1</l><l>2</l><t>t</t></o>"
    delta = b"<o><l>9</l></o>"
    assert canon(XML.merge(base, delta)) == canon(b"<o><id>1</id><l>9</l><t>t</t></o>")
    delta2 = b"<o><l>7</l><l>8</l></o>"
    assert canon(XML.merge(base, delta2)) == canon(b"<o><id>1</id><l>7</l><l>8</l><t>t</t></o>")


def test_merge_leaf_replaces_compound_content() -> None:
    assert canon(XML.merge(b"<o><c><x>1</x></c></o>", b"<o><c>flat</c></o>")) == canon(b"<o><c>flat</c></o>")


def test_merge_other_root_takes_the_delta() -> None:
    assert XML.merge(b"<a><x>1</x></a>", b"<b><x>2</x></b>") == b"<b><x>2</x></b>"


def test_merge_output_has_no_declaration_and_is_utf8() -> None:
    out = XML.merge(b"<a><t>x</t></a>", "<a><t>é</t></a>".encode())
    assert not out.startswith(b"<?xml")
    assert "é".encode() in out


# -- diff ----------------------------------------------------------------------------------------------


def test_diff_changed_elements_plus_key() -> None:
    old = b"<buyer><id>100</id><loc>NY</loc><n>a</n></buyer>"
    new = b"<buyer><id>100</id><loc>LN</loc><n>a</n></buyer>"
    assert canon(XML.diff(old, new, ["/buyer/id"])) == canon(b"<buyer><id>100</id><loc>LN</loc></buyer>")


def test_diff_nested_and_attributes() -> None:
    old = b'<o k="1" s="a"><c><x>1</x><y>2</y></c></o>'
    new = b'<o k="1" s="b"><c><x>1</x><y>3</y></c><d>n</d></o>'
    assert canon(XML.diff(old, new, ["/o/@k"])) == canon(b'<o k="1" s="b"><c><y>3</y></c><d>n</d></o>')


def test_diff_repeated_elements_sent_whole_when_any_changed() -> None:
    old = b"<o><l>1</l><l>2</l></o>"
    new = b"<o><l>1</l><l>3</l></o>"
    assert canon(XML.diff(old, new)) == canon(b"<o><l>1</l><l>3</l></o>")
    assert canon(XML.diff(old, old)) == canon(b"<o/>")


def test_diff_merged_back_gives_new() -> None:
    old = b'<o a="1"><id>7</id><c><x>1</x><y>2</y></c><l>1</l><l>2</l></o>'
    new = b'<o a="2"><id>7</id><c><x>1</x><y>5</y></c><l>3</l><z>z</z></o>'
    delta = XML.diff(old, new, ["/o/id"])
    assert canon(XML.merge(old, delta)) == canon(new)
