# cython: language_level=3
"""Compiled twin of the fan-out's frame building (:class:`broker.protocol._frames.DeliveryBatch`).

``parts`` encodes each message's header once, around the place ``sids`` goes; ``join`` writes every frame of
a batch for one client into one bytes object. Both give exactly what the pure-Python code in
:mod:`broker.protocol._frames` gives (``tests/protocol/test_protocol_delivery_batch.py`` checks it on
arbitrary input); a message whose values are not plain goes to the Python ``fallback`` unchanged.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t

from broker.speedups.cbytes cimport plain_bytes, put

from broker.errors import LocalProtocolError

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object)
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL

#: The largest payload the 4-byte length prefix can describe.
cdef Py_ssize_t MAX_PAYLOAD = 0xFFFFFFFF
#: The tail of a message with no ``bm``, ``k`` or ``x`` (shared, so :func:`join` sees it is the same).
cdef bytes _CLOSE = b"}"


cdef inline bint _plain(object value, const char** data, Py_ssize_t* size) except -1:
    """Whether ``value`` is a str of printable ASCII without ``"``, ``\\``, ``[``, ``{`` (``_is_plain``)."""
    if type(value) is not str or not PyUnicode_IS_ASCII(value):
        return False
    data[0] = PyUnicode_AsUTF8AndSize(value, size)
    return plain_bytes(<const uint8_t *>data[0], size[0])


def parts(str topic, list messages, fallback):
    """Each message's ``(fixed, head, tail, body)``: the frame is the 4-byte length ``fixed + len(quoted
    sids)``, ``head``, the quoted sids, ``tail``, ``body``.

    Args:
        topic: The topic of every message.
        messages: ``(body, bm, k, x)`` per message (absent values ``None``).
        fallback: ``fallback(topic, body, bm, k, x)`` gives the parts of a message with a value that is not
            plain (or a body too large): the pure-Python encoder, its errors included.
    """
    cdef const char* tdata
    cdef const char* vdata[3]
    cdef Py_ssize_t tsize, vsize[3], n, i
    cdef bytes head = None, tail
    cdef char* out
    cdef list result = []
    cdef tuple one
    cdef object body, value
    cdef bint plain
    cdef const char* names[3]
    cdef Py_ssize_t name_sizes[3]
    names[0] = b',"bm":"'
    names[1] = b',"k":"'
    names[2] = b',"x":"'
    name_sizes[0] = 7
    name_sizes[1] = 6
    name_sizes[2] = 6
    if _plain(topic, &tdata, &tsize):
        head = PyBytes_FromStringAndSize(NULL, 14 + tsize + 9)
        out = PyBytes_AS_STRING(head)
        out = put(out, b'{"c":"p","t":"', 14)
        out = put(out, tdata, tsize)
        put(out, b'","sids":', 9)
    for one in messages:
        body = one[0]
        plain = head is not None and type(body) is bytes and PyBytes_GET_SIZE(body) <= MAX_PAYLOAD
        n = 1
        for i in range(3):
            value = one[i + 1]
            vsize[i] = -1
            if plain and value is not None:
                if _plain(value, &vdata[i], &vsize[i]):
                    n += name_sizes[i] + vsize[i] + 1
                else:
                    plain = False
        if not plain:
            result.append(fallback(topic, body, one[1], one[2], one[3]))
            continue
        if n == 1:
            result.append((len(head) + 1 + PyBytes_GET_SIZE(body), head, _CLOSE, body))
            continue
        tail = PyBytes_FromStringAndSize(NULL, n)
        out = PyBytes_AS_STRING(tail)
        for i in range(3):
            if vsize[i] >= 0:
                out = put(out, names[i], name_sizes[i])
                out = put(out, vdata[i], vsize[i])
                out[0] = b'"'
                out += 1
        out[0] = b'}'
        result.append((len(head) + n + PyBytes_GET_SIZE(body), head, tail, body))
    return result


def join(list parts, bytes quoted):
    """Every frame of ``parts`` (from :func:`parts`) for the client whose quoted sids are ``quoted``, in one
    bytes object."""
    cdef Py_ssize_t total = 0, q = PyBytes_GET_SIZE(quoted), size, hsize, tsize, msize = 0
    cdef tuple one
    cdef bytes head, tail, body, result
    cdef bytes last_head = None, last_tail = None, middle = None
    cdef char* out
    for one in parts:
        size = <Py_ssize_t>one[0] + q
        if size > MAX_PAYLOAD:
            raise LocalProtocolError(f"frame payload of {size} bytes does not fit the 4-byte length prefix")
        total += 4 + size
    result = PyBytes_FromStringAndSize(NULL, total)
    out = PyBytes_AS_STRING(result)
    for one in parts:
        size = <Py_ssize_t>one[0] + q
        head = one[1]
        tail = one[2]
        body = one[3]
        out[0] = <char>((size >> 24) & 0xFF)
        out[1] = <char>((size >> 16) & 0xFF)
        out[2] = <char>((size >> 8) & 0xFF)
        out[3] = <char>(size & 0xFF)
        out += 4
        if head is last_head and tail is last_tail:
            # The same head and tail as the frame before (a batch's messages without bm, k or x): head, quoted sids
            # and tail joined once, then copied as one piece.
            if middle is None:
                hsize = PyBytes_GET_SIZE(head)
                tsize = PyBytes_GET_SIZE(tail)
                msize = hsize + q + tsize
                middle = PyBytes_FromStringAndSize(NULL, msize)
                put(put(put(PyBytes_AS_STRING(middle), PyBytes_AS_STRING(head), hsize), PyBytes_AS_STRING(quoted),
                        q), PyBytes_AS_STRING(tail), tsize)
            out = put(out, PyBytes_AS_STRING(middle), msize)
        else:
            out = put(out, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head))
            out = put(out, PyBytes_AS_STRING(quoted), q)
            out = put(out, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail))
            last_head, last_tail, middle = head, tail, None
        out = put(out, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body))
    return result
