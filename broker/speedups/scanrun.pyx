# cython: language_level=3
"""Compiled twin of :func:`broker.engine.queries.match_run`: one run of a SOW scan's stored records tested
against a filter on their decoded JSON objects.

Per record it does what the Python function does, in the same order and with the same calls: the stored
value's head is read (a value too short for it raises ``struct.error`` through the same ``unpack_from``),
an expired record is skipped, the data is decoded with ``loads``, and the record is kept when ``test(doc)``
(a decoded object) or ``undecided(data, doc)`` (anything else, ``none`` for a body ``loads`` refuses) is
true. Only the loop, the head and the slicing are in C, and one shortcut: given the filter's ``members``, a
flat ASCII object (every value a string without escapes, a number or a literal) is read by :func:`project`
into an object of just those members, and ``test`` gets that (it reads nothing else: ``dict.get`` of those
names), instead of ``loads`` building every member. Anything else is decoded by ``loads`` as before, and so is
a record with an exponent in a member the filter does not read (out of range, it makes ``loads`` refuse the
record, and ``undecided`` answers for it).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.stdint cimport uint64_t
from libc.string cimport memcmp

cdef enum:
    #: The stored value's fixed head (broker.sow.record._HEAD, "<QQQHH"): timestamp, sequence, expiry, lengths.
    HEAD = 28
    #: Digits (and sign) of an integer read in C: below 10**18, so within a signed 64-bit integer.
    SHORT_INT = 18


cdef inline Py_ssize_t _skip(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept:
    """The position of the first byte at or after ``i`` that is not JSON whitespace (``n``: none)."""
    cdef unsigned char c
    while i < n:
        c = p[i]
        if c != 0x20 and c != 0x0a and c != 0x0d and c != 0x09:
            break
        i += 1
    return i


cdef inline bint _digit(unsigned char c) noexcept:
    return 0x30 <= c <= 0x39


cdef inline Py_ssize_t _plain_string(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept:
    """The position of the ``"`` closing the string whose text starts at ``i``, or -1 when it holds an escape,
    a control character or a byte past ASCII (left to ``loads``), or is not closed."""
    cdef unsigned char c
    while i < n:
        c = p[i]
        if c == 0x22:
            return i
        if c == 0x5c or c < 0x20 or c >= 0x80:
            return -1
        i += 1
    return -1


cdef inline Py_ssize_t _number_end(const unsigned char* p, Py_ssize_t i, Py_ssize_t n, bint* integer,
                                   bint* exponent) noexcept:
    """The end of the JSON number at ``i`` (RFC 8259's grammar: no ``+``, no leading zero, digits after ``.``
    and ``e``), -1 when there is none; ``integer``: it has no fraction and no exponent; ``exponent``: it has
    one."""
    if p[i] == 0x2d:
        i += 1
    if i >= n:
        return -1
    if p[i] == 0x30:
        i += 1
    elif _digit(p[i]):
        while i < n and _digit(p[i]):
            i += 1
    else:
        return -1
    integer[0] = True
    exponent[0] = False
    if i < n and p[i] == 0x2e:
        integer[0] = False
        i += 1
        if i >= n or not _digit(p[i]):
            return -1
        while i < n and _digit(p[i]):
            i += 1
    if i < n and (p[i] == 0x65 or p[i] == 0x45):
        integer[0] = False
        exponent[0] = True
        i += 1
        if i < n and (p[i] == 0x2b or p[i] == 0x2d):
            i += 1
        if i >= n or not _digit(p[i]):
            return -1
        while i < n and _digit(p[i]):
            i += 1
    return i


cdef object _project(const unsigned char* p, Py_ssize_t n, tuple names, tuple keys, object loads,
                     object bad_json):
    """The members ``keys`` (``str``; ``names``: the same as ``bytes``) of the flat JSON object in the ``n``
    bytes at ``p``, as ``loads`` decodes them (the last one of a name given twice), or ``None`` when the text is
    not a flat ASCII object (every value a string without escapes, a number, ``true``, ``false`` or ``null``)
    or a member not read has an exponent: ``loads`` then decides."""
    cdef dict out = {}
    cdef Py_ssize_t i, start, end, length, m, count = len(names)
    cdef int which
    cdef bint integer, exponent
    cdef long long whole
    cdef unsigned char c
    cdef object value
    cdef bytes name
    i = _skip(p, 0, n)
    if i >= n or p[i] != 0x7b:
        return None
    i = _skip(p, i + 1, n)
    if i < n and p[i] == 0x7d:
        i += 1
    else:
        while True:
            if i >= n or p[i] != 0x22:
                return None
            start = i + 1
            end = _plain_string(p, start, n)
            if end < 0:
                return None
            length = end - start
            i = _skip(p, end + 1, n)
            if i >= n or p[i] != 0x3a:
                return None
            i = _skip(p, i + 1, n)
            if i >= n:
                return None
            which = -1
            for m in range(count):
                name = <bytes>names[m]
                if PyBytes_GET_SIZE(name) == length and memcmp(PyBytes_AS_STRING(name), p + start, length) == 0:
                    which = m
                    break
            c = p[i]
            if c == 0x22:
                end = _plain_string(p, i + 1, n)
                if end < 0:
                    return None
                if which >= 0:
                    out[keys[which]] = PyUnicode_DecodeASCII(<const char*>p + i + 1, end - i - 1, NULL)
                i = end + 1
            elif c == 0x2d or _digit(c):
                end = _number_end(p, i, n, &integer, &exponent)
                if end < 0:
                    return None
                if exponent and which < 0:  # it may be out of range, and then the decode refuses the record
                    return None
                if which >= 0:
                    if integer and end - i <= SHORT_INT:
                        whole = 0
                        for start in range(i + (p[i] == 0x2d), end):
                            whole = whole * 10 + (p[start] - 0x30)
                        out[keys[which]] = -whole if p[i] == 0x2d else whole
                    else:  # a fraction, an exponent or a wide integer: as ``loads`` reads it
                        try:
                            value = loads(PyBytes_FromStringAndSize(<const char*>p + i, end - i))
                        except bad_json:
                            return None
                        out[keys[which]] = value
                i = end
            elif c == 0x74 and n - i >= 4 and memcmp(p + i, b"true", 4) == 0:
                if which >= 0:
                    out[keys[which]] = True
                i += 4
            elif c == 0x66 and n - i >= 5 and memcmp(p + i, b"false", 5) == 0:
                if which >= 0:
                    out[keys[which]] = False
                i += 5
            elif c == 0x6e and n - i >= 4 and memcmp(p + i, b"null", 4) == 0:
                if which >= 0:
                    out[keys[which]] = None
                i += 4
            else:  # an object or array inside, or not JSON
                return None
            i = _skip(p, i, n)
            if i >= n:
                return None
            if p[i] == 0x2c:
                i = _skip(p, i + 1, n)
                continue
            if p[i] != 0x7d:
                return None
            i += 1
            break
    i = _skip(p, i, n)
    return out if i == n else None


def project(bytes data, tuple keys, object loads, object bad_json):
    """The members ``keys`` of the flat JSON object ``data`` as ``loads`` decodes them (only those; the ones it
    has), or ``None`` when ``data`` is not a flat ASCII object (see :func:`_project`). For the tests."""
    names = tuple(k.encode() for k in keys)
    return _project(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), names, keys, loads,
                    bad_json)


def match_run(list run, object topic, object test, object undecided, object now_ns, object loads, object bad_json,
              object none, object unpack, tuple members=None):
    """The rows ``(topic, key, value, None)`` of ``run`` (``(key, stored value)`` pairs) that pass; see the
    module docstring and :func:`broker.engine.queries.match_run`. ``members``: the top-level names ``test``
    reads (``None``: every record decoded whole)."""
    cdef list out = []
    cdef Py_ssize_t size = 0, lbm, lx, off, d
    cdef const unsigned char* v = NULL
    cdef uint64_t expire_at, now = now_ns if now_ns else 0
    cdef object key, value, data, doc
    cdef tuple names = tuple(k.encode() for k in members) if members is not None else None
    for key, value in run:
        if type(value) is not bytes or PyBytes_GET_SIZE(value) < HEAD:
            _, _, expire_at, lbm, lx = unpack(value)  # raises what the Python loop raises, or reads what it reads
            off = HEAD + lbm + lx
            data = value[off:]
        else:
            size = PyBytes_GET_SIZE(value)
            v = <const unsigned char*>PyBytes_AS_STRING(value)
            expire_at = 0
            for d in range(23, 15, -1):
                expire_at = (expire_at << 8) | v[d]
            lbm = v[24] | (v[25] << 8)
            lx = v[26] | (v[27] << 8)
            off = HEAD + lbm + lx
            if off > size:
                off = size
            data = None
        if now and expire_at and expire_at <= now:
            continue
        doc = None
        if data is None:
            if names is not None:
                doc = _project(v + off, size - off, names, members, loads, bad_json)
            if doc is None:
                data = PyBytes_FromStringAndSize(<const char*>v + off, size - off)
        if doc is None:
            try:
                doc = loads(data)
            except bad_json:
                doc = none
        if (test(doc) if type(doc) is dict else undecided(data, doc)):
            out.append((topic, key, value, None))
    return out
