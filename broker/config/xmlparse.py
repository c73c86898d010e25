"""Hardened XML parsing of configuration files and ``<Include>`` fragments.

The parser never resolves entities, never loads a DTD and never touches the network, and keeps lxml's
size limits (``huge_tree=False``), so a hostile file cannot expand into gigabytes ("billion laughs") or
read other files through external entities. A ``<!DOCTYPE>`` is rejected with a hint: before AMPS 5.2,
configs were split with DTD entities; ``<Include>`` replaces them.

Malformed XML is reported at the line lxml gives, in the file that holds it; for an included file the
message names the line, column and kind of error only, never the file's contents. Nothing here raises.
"""

from __future__ import annotations

import re

from lxml import etree

from broker.config.issues import SOURCE_ATTR, IssueLog, is_element
from broker.config.model import Where
from broker.xmlparsing import hardened_parser

#: Wraps an included fragment so that it may hold several top-level elements (AMPS allows that).
FRAGMENT_TAG = "BrokerIncludedFragment"

_DECL_RE = re.compile(rb"\s*<\?xml\b[^>]*?\?>")
_ENCODING_RE = re.compile(rb"""encoding\s*=\s*["']([A-Za-z0-9._-]{1,40})["']""")
_DOCTYPE_RE = re.compile(rb"<!(DOCTYPE|ENTITY)\b")
_BOM = b"\xef\xbb\xbf"
_DOCTYPE_MESSAGE = (
    "<!DOCTYPE> and entity declarations are not allowed (they could read other files or expand without "
    "bound); split the configuration with <Include>file.xml</Include> instead"
)


def make_parser() -> etree.XMLParser:
    """The one parser configuration used for every configuration file."""
    return hardened_parser(remove_blank_text=False, collect_ids=False)


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _clean_message(message: str) -> str:
    """lxml's message without its trailing ``line N, column M`` (we print the line ourselves)."""
    message = re.sub(r",? line \d+, column (\d+)$", r" (column \1)", message.strip())
    return message.replace(f"and {FRAGMENT_TAG}", "and the end of the file").replace(FRAGMENT_TAG, "fragment")


def _stamp(root: etree._Element, file_index: int) -> None:
    for el in root.iter():
        if is_element(el):
            el.set(SOURCE_ATTR, str(file_index))


def _report(log: IssueLog, exc: Exception, where: Where) -> None:
    if isinstance(exc, etree.XMLSyntaxError):
        line = exc.lineno or 0
        message = _clean_message(exc.msg or str(exc))
    else:
        line = 0
        message = str(exc) or type(exc).__name__
    log.error(where, f"malformed XML: {message}", line=line)


def _report_without_contents(log: IssueLog, exc: Exception, where: Where, prefix_length: int) -> None:
    """Report a malformed included file by line, column and the kind of error only.

    lxml's messages quote the file (tag and entity names, bytes): an ``<Include>`` may name any file
    the broker can read (``/etc/shadow`` when run as root), so nothing of its contents is printed.
    """
    line, column, kind = 0, 0, "not an XML fragment"
    if isinstance(exc, etree.XMLSyntaxError):
        line = exc.lineno or 0
        position = getattr(exc, "position", None)
        if position and position[0] == line:
            column = max(1, position[1] - (prefix_length if line == 1 else 0))
        name = etree.ErrorTypes._getName(exc.code, "") if exc.code else ""
        if name:
            kind = name.removeprefix("ERR_").removeprefix("WAR_").replace("_", " ").lower()
    at = f" (column {column})" if column else ""
    log.error(where, f"malformed XML in the included file: {kind}{at}; an included file holds XML "
                     "elements, or the text of one value (its contents are not shown)", line=line)


def parse_document(data: bytes, file_index: int, log: IssueLog) -> etree._Element | None:
    """Parse a whole configuration file (the main one).

    Returns:
        The root element with every element stamped with ``file_index``, or ``None`` after logging
        why the file cannot be used.
    """
    where = Where(log.files[file_index], 0, "")
    try:
        root = etree.fromstring(data, make_parser())
    except (etree.LxmlError, ValueError, LookupError) as exc:
        doctype = _DOCTYPE_RE.search(data)
        if doctype:  # e.g. libxml2 refusing entity amplification: name the real cause
            log.error(where, _DOCTYPE_MESSAGE, line=_line_of(data, doctype.start()))
        else:
            _report(log, exc, where)
        return None
    if root is None:  # pragma: no cover - lxml raises on an empty document
        log.error(where, "the file holds no XML element", line=1)
        return None
    docinfo = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None:
        match = _DOCTYPE_RE.search(data)
        log.error(where, _DOCTYPE_MESSAGE, line=_line_of(data, match.start()) if match else 1)
        return None
    _stamp(root, file_index)
    return root


def parse_fragment(data: bytes, file_index: int, log: IssueLog, path: str) -> etree._Element | None:
    """Parse an included file: a bare fragment (one or more elements, no declaration needed).

    Args:
        data: The file's bytes.
        file_index: The file's index in ``log.files``.
        log: Where problems go.
        path: The element path of the ``<Include>`` (for context in messages).

    Returns:
        A wrapper element (tag :data:`FRAGMENT_TAG`) whose text and children are the fragment, or
        ``None`` after logging why the file cannot be used.
    """
    where = Where(log.files[file_index], 0, path)
    doctype = _DOCTYPE_RE.search(data)
    if doctype:
        log.error(where, _DOCTYPE_MESSAGE, line=_line_of(data, doctype.start()))
        return None
    body = data[len(_BOM):] if data.startswith(_BOM) else data
    encoding = b"UTF-8"
    decl = _DECL_RE.match(body)
    if decl:
        found = _ENCODING_RE.search(decl.group())
        if found:
            encoding = found.group(1)
        # Blank the declaration but keep its newlines so that line numbers stay true.
        blanked = bytes(c if c == 0x0A else 0x20 for c in decl.group())
        body = blanked + body[decl.end():]
    # The wrapper starts on line 1 with no newline, so fragment line N is document line N.
    text = b'<?xml version="1.0" encoding="' + encoding + b'"?><' + FRAGMENT_TAG.encode() + b">"
    text += body + b"</" + FRAGMENT_TAG.encode() + b">"
    prefix_length = len(text) - len(body) - len(FRAGMENT_TAG) - 3
    try:
        root = etree.fromstring(text, make_parser())
    except (etree.LxmlError, ValueError, LookupError) as exc:
        _report_without_contents(log, exc, where, prefix_length)
        return None
    _stamp(root, file_index)
    return root
