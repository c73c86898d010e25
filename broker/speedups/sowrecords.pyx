# cython: language_level=3
"""Compiled twin of :meth:`broker.sow.record.WireRecords.add`'s formatting loop: the inner headers and data of
query results (``sow`` batch records), built straight from stored values.

:func:`add_records` appends, for each row, exactly the two parts the pure-Python loop appends (the header
formatted with ``_HEADER`` or ``_HEADER_PLAIN``, then the data), with the same per-second timestamp cache.
A row it does not handle as the Python loop would (a key or value that is not ``bytes``, a value shorter than
its own header says) makes it stop and return the row's index: the caller formats that row and the rest in
Python, so every answer, error included, is the pure-Python code's.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint64_t
from libc.string cimport memcpy

import time

cdef bytes _BM = b'","bm":"'
cdef bytes _TS = b'","ts":"'
cdef bytes _X = b'Z","x":"'
cdef bytes _L = b'","l":'
cdef enum:
    #: The stored value's fixed head (broker.sow.record._HEAD, "<QQQHH"): timestamp, sequence, expiry, lengths.
    HEAD = 28


cdef inline char* _put(char* out, const char* src, Py_ssize_t n):
    memcpy(out, src, n)
    return out + n


cdef inline Py_ssize_t _digits(Py_ssize_t n):
    cdef Py_ssize_t d = 1
    while n >= 10:
        n //= 10
        d += 1
    return d


def add_records(list parts, rows, bytes prefix, dict seconds, Py_ssize_t start=0):
    """Append the header and data of ``rows[start:]`` to ``parts``; returns ``len(rows)``, or the index of
    the first row left to the pure-Python loop.

    Args:
        parts: The frame's parts so far.
        rows: ``(topic, key, stored value, message)`` per record (only the key and the value are read).
        prefix: ``{"t":"<topic>","k":"`` (raw, not a format).
        seconds: Epoch second -> ``YYYYmmddTHHMMSS`` (shared with the Python loop).
        start: The first row to format.
    """
    cdef Py_ssize_t i, n = len(rows), size, lbm, lx, off, dlen, hlen, klen, tlen, d, plen = len(prefix)
    cdef const unsigned char* v
    cdef uint64_t ts, secs, usec
    cdef object key, value, text, row
    cdef bytes header
    cdef char* out
    cdef char* end
    cdef const char* bm = PyBytes_AS_STRING(_BM)
    cdef const char* tsl = PyBytes_AS_STRING(_TS)
    cdef const char* xl = PyBytes_AS_STRING(_X)
    cdef const char* ll = PyBytes_AS_STRING(_L)
    for i in range(start, n):
        row = rows[i]
        key = row[1]
        value = row[2]
        if type(key) is not bytes or type(value) is not bytes:
            return i
        size = PyBytes_GET_SIZE(value)
        if size < HEAD:
            return i
        v = <const unsigned char*>PyBytes_AS_STRING(value)
        lbm = v[24] | (v[25] << 8)
        lx = v[26] | (v[27] << 8)
        off = HEAD + lbm + lx
        if off > size:
            return i
        ts = 0
        for d in range(7, -1, -1):
            ts = (ts << 8) | v[d]
        secs = ts // 1000000000
        usec = (ts % 1000000000) // 1000
        text = seconds.get(secs)
        if text is None:
            text = seconds[secs] = time.strftime("%Y%m%dT%H%M%S", time.gmtime(secs)).encode()
        if type(text) is not bytes:
            return i
        dlen = size - off
        klen = PyBytes_GET_SIZE(key)
        tlen = PyBytes_GET_SIZE(text)
        hlen = plen + klen + 8 + lbm + 8 + tlen + 1 + 6 + 8 + lx + 6 + _digits(dlen) + 1
        header = PyBytes_FromStringAndSize(NULL, hlen)
        out = PyBytes_AS_STRING(header)
        out = _put(out, PyBytes_AS_STRING(prefix), plen)
        out = _put(out, PyBytes_AS_STRING(key), klen)
        out = _put(out, bm, 8)
        out = _put(out, <const char*>v + HEAD, lbm)
        out = _put(out, tsl, 8)
        out = _put(out, PyBytes_AS_STRING(text), tlen)
        out[0] = b'.'
        for d in range(6, 0, -1):
            out[d] = <char>(48 + usec % 10)
            usec //= 10
        out += 7
        out = _put(out, xl, 8)
        out = _put(out, <const char*>v + HEAD + lbm, lx)
        out = _put(out, ll, 6)
        end = out + _digits(dlen)
        out = end
        d = dlen
        while True:
            end -= 1
            end[0] = <char>(48 + d % 10)
            d //= 10
            if d == 0:
                break
        out[0] = b'}'
        parts.append(header)
        parts.append(PyBytes_FromStringAndSize(<const char*>v + off, dlen))
    return n
