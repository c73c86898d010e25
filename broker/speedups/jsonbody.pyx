# cython: language_level=3
"""Compiled twin of the usual case of :meth:`JsonMessageType.parse(data, keyed=True, max_depth=N)
<broker.messagetypes._json.JsonMessageType.parse>` (see :mod:`broker.speedups`).

:func:`parse_object` decodes a publish's JSON object body in one call: the nesting bound checked by counting
brackets in C, ``orjson.loads``, the top-level check and the message built. Anything else (a body with more
brackets than the bound, which needs the exact depth scan; text orjson refuses, such as integers wider than 64
bits; a top level that is not an object; a body that is not ``bytes``) answers ``None``, and the caller's
pure-Python code decides, with its own results and errors.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

import orjson

cdef object _loads = orjson.loads
cdef object _JSONDecodeError = orjson.JSONDecodeError


def parse_object(data, Py_ssize_t max_depth, message_class):
    """``message_class(data, doc)`` for a ``bytes`` body that holds a JSON object with at most ``max_depth``
    brackets (``-1``: no bound), or ``None`` for the pure-Python code to decide (see the module docstring).
    """
    if type(data) is not bytes:
        return None
    cdef const char *p
    cdef Py_ssize_t n, i, brackets = 0
    cdef char c
    if max_depth >= 0:
        p = PyBytes_AS_STRING(data)
        n = PyBytes_GET_SIZE(data)
        for i in range(n):
            c = p[i]
            if c == b'[' or c == b'{':
                brackets += 1
        if brackets > max_depth:
            return None
    try:
        doc = _loads(data)
    except _JSONDecodeError:
        return None
    if type(doc) is not dict:
        return None
    return message_class(data, doc)
