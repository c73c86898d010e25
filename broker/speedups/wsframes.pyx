# cython: language_level=3
"""Compiled twin of the WebSocket transport's hot path: deliveries (``{"c":"p",...}`` with data) turned into
WebSocket messages (:func:`broker.protocol.websocket._deliveries_python`, which is the reference; the
tests check both give the same bytes on arbitrary input)."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp, memcpy


cdef inline Py_ssize_t _head_size(Py_ssize_t n):
    return 2 if n < 126 else 4 if n < 65536 else 10


cdef inline char* _head(char* out, unsigned char opcode, Py_ssize_t n):
    out[0] = <char>opcode
    if n < 126:
        out[1] = <char>n
        return out + 2
    if n < 65536:
        out[1] = <char>126
        out[2] = <char>((n >> 8) & 0xFF)
        out[3] = <char>(n & 0xFF)
        return out + 4
    out[1] = <char>127
    cdef int i
    for i in range(8):
        out[2 + i] = <char>((n >> (8 * (7 - i))) & 0xFF)
    return out + 10


cdef inline bint _utf8(const char* data, Py_ssize_t n):
    """Whether ``data`` is UTF-8 (ASCII checked in place, anything else decoded once)."""
    cdef Py_ssize_t i
    for i in range(n):
        if <unsigned char>data[i] >= 0x80:
            try:
                PyUnicode_DecodeUTF8(data, n, NULL)
            except UnicodeDecodeError:
                return False
            return True
    return True


def deliveries(bytes frames, Py_ssize_t pos, bint text):
    """The WebSocket bytes of the deliveries at ``pos`` in ``frames`` (AMPS TCP frames), up to the first
    frame that is not one (or is incomplete); returns ``(bytes, position of that frame)``."""
    cdef const char* buf = PyBytes_AS_STRING(frames)
    cdef Py_ssize_t total = PyBytes_GET_SIZE(frames)
    cdef Py_ssize_t start, end, close, i, quotes, n, body_n, size = 0, first = pos
    cdef unsigned char c, data_opcode = 0x81 if text else 0x82, opcode
    cdef bint ok
    # Two passes: find the run of deliveries and the output size, then write it.
    cdef list runs = []
    while pos + 4 <= total:
        n = ((<unsigned char>buf[pos] << 24) | (<unsigned char>buf[pos + 1] << 16)
             | (<unsigned char>buf[pos + 2] << 8) | <unsigned char>buf[pos + 3])
        start = pos + 4
        end = start + n
        if end > total or n < 9 or memcmp(buf + start, b'{"c":"p",', 9) != 0:
            break
        close = -1
        quotes = 0
        ok = True
        for i in range(start, end):
            c = <unsigned char>buf[i]
            if c == 0x7d:  # }
                close = i
                break
            if c == 0x5c:  # a backslash before the first }: not the hot path
                ok = False
                break
            if c == 0x22:
                quotes += 1
        if not ok or close <= 0 or close >= end - 1 or quotes & 1:
            break
        for i in range(start, close - 3):
            if buf[i] == b'"' and buf[i + 1] == b's' and buf[i + 2] == b'"' and buf[i + 3] == b':':
                ok = False
                break
        if not ok:
            break
        n = close + 1 - start
        body_n = end - close - 1
        opcode = data_opcode
        if text and not _utf8(buf + close + 1, body_n):
            opcode = 0x82
        runs.append((start, close, end, opcode))
        size += _head_size(n) + n + _head_size(body_n) + body_n
        pos = end
    if not runs:
        return b"", first
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef char* w = PyBytes_AS_STRING(out)
    cdef tuple run
    for run in runs:
        start, close, end, opcode = run
        n = close + 1 - start
        w = _head(w, 0x81, n)
        memcpy(w, buf + start, n)
        w += n
        body_n = end - close - 1
        w = _head(w, opcode, body_n)
        memcpy(w, buf + close + 1, body_n)
        w += body_n
    return out, pos
