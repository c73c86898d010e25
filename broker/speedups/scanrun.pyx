# cython: language_level=3
"""Compiled twin of :func:`broker.engine.queries.match_run`: one run of a SOW scan's stored records tested
against a filter on their decoded JSON objects.

Per record it does what the Python function does, in the same order and with the same calls: the stored
value's head is read (a value too short for it raises ``struct.error`` through the same ``unpack_from``),
an expired record is skipped, the data is decoded with ``loads``, and the record is kept when ``test(doc)``
(a decoded object) or ``undecided(data, doc)`` (anything else, ``none`` for a body ``loads`` refuses) is
true. Only the loop, the head and the slicing are in C.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint64_t

cdef enum:
    #: The stored value's fixed head (broker.sow.record._HEAD, "<QQQHH"): timestamp, sequence, expiry, lengths.
    HEAD = 28


def match_run(list run, object topic, object test, object undecided, object now_ns, object loads, object bad_json,
              object none, object unpack):
    """The rows ``(topic, key, value, None)`` of ``run`` (``(key, stored value)`` pairs) that pass; see the
    module docstring and :func:`broker.engine.queries.match_run`."""
    cdef list out = []
    cdef Py_ssize_t size, lbm, lx, off, d
    cdef const unsigned char* v
    cdef uint64_t expire_at, now = now_ns if now_ns else 0
    cdef object key, value, data, doc
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
        if data is None:
            data = PyBytes_FromStringAndSize(<const char*>v + off, size - off)
        try:
            doc = loads(data)
        except bad_json:
            doc = none
        if (test(doc) if type(doc) is dict else undecided(data, doc)):
            out.append((topic, key, value, None))
    return out
