# cython: language_level=3
"""Compiled twins of the usual cases of a JSON publish body (see :mod:`broker.speedups`): the keyed parse
(:meth:`JsonMessageType.parse(data, keyed=True, max_depth=N) <broker.messagetypes._json.JsonMessageType.parse>`)
and the plain-topic wrapper (:meth:`JsonMessageType.lazy <broker.messagetypes._json.JsonMessageType.lazy>`, twin
``_lazy_python``).

:func:`parse_object` decodes a publish's JSON object body in one call: the nesting bound checked by counting
brackets in C, ``orjson.loads``, the top-level check and the message built. Anything else (a body with more
brackets than the bound, which needs the exact depth scan; text orjson refuses, such as integers wider than 64
bits; a top level that is not an object; a body that is not ``bytes``) answers ``None``, and the caller's
pure-Python code decides, with its own results and errors.

:func:`lazy_message` wraps a publish body to a topic without a SOW undecoded, ``message_class(data)``, when it is
``bytes`` within the same bracket bound; anything else answers ``None`` for the pure-Python code.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

import orjson

cdef object _loads = orjson.loads
cdef object _JSONDecodeError = orjson.JSONDecodeError


cdef bint _within_bound(bytes data, Py_ssize_t max_depth):
    """Whether ``data`` has at most ``max_depth`` opening brackets (``-1``: no bound). More brackets than the
    bound do not mean the nesting is too deep: the caller's exact depth scan decides those."""
    if max_depth < 0:
        return True
    cdef const char *p = PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data), i, brackets = 0
    cdef char c
    for i in range(n):
        c = p[i]
        if c == b'[' or c == b'{':
            brackets += 1
    return brackets <= max_depth


def parse_object(data, Py_ssize_t max_depth, message_class):
    """``message_class(data, doc)`` for a ``bytes`` body that holds a JSON object with at most ``max_depth``
    brackets (``-1``: no bound), or ``None`` for the pure-Python code to decide (see the module docstring).
    """
    if type(data) is not bytes or not _within_bound(data, max_depth):
        return None
    try:
        doc = _loads(data)
    except _JSONDecodeError:
        return None
    if type(doc) is not dict:
        return None
    return message_class(data, doc)


def lazy_message(data, Py_ssize_t max_depth, message_class):
    """``message_class(data)`` for a ``bytes`` body with at most ``max_depth`` brackets (``-1``: no bound), or
    ``None`` for the pure-Python code to decide (see the module docstring)."""
    if type(data) is not bytes or not _within_bound(data, max_depth):
        return None
    return message_class(data)
