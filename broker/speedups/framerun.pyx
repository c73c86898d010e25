# cython: language_level=3
"""Compiled twins of the receiving side's usual frames (:mod:`broker.protocol._connection`).

- :func:`cached_header`: the remembered header of a frame payload (``_cached_header_python``), a publish store's
  ``"s"`` read into a copy of it;
- :func:`remembered_frame`: the usual frame of :meth:`Connection.next_event` (complete, within the bound, its
  header remembered) in one call (``_remembered_frame_python``);
- :func:`publish_run`: every such frame of one socket read that takes the session's publish batch, in one call
  (``_publish_run_python``, :meth:`Connection.next_publishes`).

Each gives what its pure-Python twin gives on every input (``tests/protocol/test_protocol_publish_run.py`` and
``tests/speedups/test_speedups_publish.py`` check them on arbitrary, broken and cut input): anything they do not
take (an incomplete, oversized, empty or unremembered frame) is left for the Python code, which decodes it, waits
for more bytes or fails with its message.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_Copy, PyDict_GetItemWithError, PyDict_SetItem
from cpython.list cimport PyList_Append
from cpython.long cimport PyLong_FromUnsignedLongLong
from cpython.object cimport PyObject, PyObject_GenericGetDict, PyObject_GenericSetDict, PyTypeObject
from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memchr

cdef extern from "Python.h":
    PyTypeObject PyBaseObject_Type

cdef tuple _NO_ARGS = ()
#: broker.protocol's Header and Frame, imported on first use (broker.protocol imports this module).
cdef object _HEADER = None
cdef object _FRAME = None


cdef void _classes() except *:
    global _HEADER, _FRAME
    from broker.protocol._frames import Frame
    from broker.protocol._header import Header
    _HEADER, _FRAME = Header, Frame


cdef inline object _new(object cls):
    """``object.__new__(cls)`` without the method call (``cls`` is a plain Python class)."""
    return PyBaseObject_Type.tp_new(cls, <PyObject *>_NO_ARGS, NULL)


cdef inline const char *_buffer(buf):
    """The bytes of a ``bytes`` or ``bytearray`` (``NULL`` for any other type)."""
    if type(buf) is bytes:
        return PyBytes_AS_STRING(buf)
    if type(buf) is bytearray:
        return PyByteArray_AS_STRING(buf)
    return NULL


cdef object _with_seq(object cached, const char *digits, Py_ssize_t count):
    """A copy of the remembered header ``cached`` with ``seq`` the ``count`` (1 to 19) decimal digits at ``digits``."""
    cdef uint64_t seq = 0
    cdef Py_ssize_t i
    for i in range(count):
        seq = seq * 10 + <uint64_t>(digits[i] - 48)
    fields = PyDict_Copy(PyObject_GenericGetDict(cached, NULL))
    PyDict_SetItem(fields, "seq", PyLong_FromUnsignedLongLong(seq))
    if _HEADER is None:
        _classes()
    header = _new(_HEADER)
    PyObject_GenericSetDict(header, fields, NULL)
    return header


cdef object _header_at(const char *data, Py_ssize_t start, Py_ssize_t end, dict headers, Py_ssize_t *body_start,
                       PyObject **template):
    """:func:`cached_header` for ``0 <= start < end`` within the buffer: the header, its body's start in
    ``body_start`` and the remembered header it is (or is a copy of, with another ``seq``) in ``template``; ``None``
    when not remembered."""
    cdef const char *close_at = <const char *>memchr(data + start, ord("}"), end - start)
    cdef Py_ssize_t close = -1 if close_at == NULL else close_at - data
    cdef PyObject *found
    if close <= 0:  # as buf.find's -1 (or 0) makes the Python code look up b""
        found = PyDict_GetItemWithError(headers, b"")
        body_start[0] = close + 1
        template[0] = found
        return None if found == NULL else <object>found
    cdef Py_ssize_t klen = close + 1 - start
    key = PyBytes_FromStringAndSize(data + start, klen)
    found = PyDict_GetItemWithError(headers, key)
    body_start[0] = close + 1
    template[0] = found
    if found != NULL:
        return <object>found
    cdef const char *k = data + start
    if memchr(k, ord("\\"), klen) != NULL:
        return None
    # The first '"s":' followed by 1 to 19 digits and then ',' or '}' (the regex _SEQ_FIELD).
    cdef Py_ssize_t i = 0, j, digits
    while i + 4 <= klen:
        if k[i] == b'"' and k[i + 1] == b's' and k[i + 2] == b'"' and k[i + 3] == b':':
            j = i + 4
            while j < klen and b'0' <= k[j] <= b'9':
                j += 1
            digits = j - (i + 4)
            if 1 <= digits <= 19 and j < klen and (k[j] == b',' or k[j] == b'}'):
                found = PyDict_GetItemWithError(headers, PyBytes_FromStringAndSize(k, i + 4)
                                       + PyBytes_FromStringAndSize(k + j, klen - j))
                template[0] = found
                if found == NULL:
                    return None
                return _with_seq(<object>found, k + i + 4, digits)
        i += 1
    return None


def cached_header(buf, Py_ssize_t start, Py_ssize_t end, dict headers):
    """``broker.protocol._connection._cached_header_python``, compiled: the remembered header of the frame payload
    ``buf[start:end]`` and where its body starts, or ``None``."""
    cdef const char *data = _buffer(buf)
    cdef Py_ssize_t size, body_start = 0
    cdef PyObject *template = NULL
    if data != NULL:
        size = len(buf)
        if end > size:
            end = size
        if 0 <= start < end:
            header = _header_at(data, start, end, headers, &body_start, &template)
            return None if header is None else (header, body_start)
    from broker.protocol._connection import _cached_header_python
    return _cached_header_python(buf, start, end, headers)


cdef object _frame_at(const char *data, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t max_size, dict headers,
                      Py_ssize_t *end_at, PyObject **template, PyObject **got):
    """The usual frame at ``data[pos:n]`` (see :func:`remembered_frame`), its end in ``end_at``, its header in
    ``got`` (held by the frame) and the header's remembered one in ``template``; or ``None``."""
    if pos < 0 or n - pos < 4:
        return None
    cdef const uint8_t *p = <const uint8_t *>data + pos
    cdef Py_ssize_t size = (<Py_ssize_t>p[0] << 24) | (<Py_ssize_t>p[1] << 16) | (<Py_ssize_t>p[2] << 8) | p[3]
    if size == 0 or size > max_size or size > n - pos - 4:
        return None
    cdef Py_ssize_t end = pos + 4 + size, body_start = 0
    header = _header_at(data, pos + 4, end, headers, &body_start, template)
    if header is None:
        return None
    if _FRAME is None:
        _classes()
    frame = _new(_FRAME)
    frame.header = header
    frame.body = PyBytes_FromStringAndSize(data + body_start, end - body_start)
    end_at[0] = end
    got[0] = <PyObject *>header
    return frame


def remembered_frame(buf, Py_ssize_t pos, Py_ssize_t max_size, dict headers):
    """The frame at ``buf[pos:]`` and where it ends, when it is complete, ``0 < size <= max_size`` and its
    header remembered (:func:`cached_header`): ``(Frame, end)``; else ``None``, and
    :meth:`broker.protocol.Connection.next_event`'s Python code takes it (waits, decodes, or fails)."""
    cdef const char *data = _buffer(buf)
    cdef Py_ssize_t end = 0
    cdef PyObject *template = NULL
    cdef PyObject *got = NULL
    if data == NULL:
        return None
    frame = _frame_at(data, len(buf), pos, max_size, headers, &end, &template, &got)
    return None if frame is None else (frame, end)


def publish_run(buf, Py_ssize_t pos, Py_ssize_t max_size, dict headers, list batch, plain, commands, acks):
    """Every frame from ``buf[pos:]`` on that :func:`remembered_frame` gives and whose header takes the publish
    batch (``plain``, or its command in ``commands`` and its ``ack_type`` or ``""`` in ``acks``), appended to
    ``batch``, up to the first that is not: ``(pos after the last taken, frames taken, the last header taken or
    plain)``."""
    cdef const char *data = _buffer(buf)
    cdef Py_ssize_t n, end = 0, taken = 0
    cdef PyObject *template = NULL
    cdef PyObject *got = NULL
    # The remembered header of the last frame taken: a frame read from it (the same bytes but for "s") takes
    # the batch too, without looking at its fields again.
    cdef PyObject *accepted = NULL
    if data == NULL:
        return pos, 0, plain
    n = len(buf)
    while True:
        frame = _frame_at(data, n, pos, max_size, headers, &end, &template, &got)
        if frame is None:
            break
        header = <object>got
        if template != accepted and header is not plain:
            ack_type = header.ack_type
            if header.command not in commands or (ack_type if ack_type is not None else "") not in acks:
                break
            accepted = template
        plain = header
        PyList_Append(batch, frame)
        pos = end
        taken += 1
    return pos, taken, plain
