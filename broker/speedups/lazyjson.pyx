# cython: language_level=3
"""Compiled twin of :func:`broker.messagetypes._json._lazy_python`: the usual case of
:meth:`JsonMessageType.lazy <broker.messagetypes._json.JsonMessageType.lazy>` (a publish to a topic without a SOW)
in one call.

A ``bytes`` body with at most ``max_depth`` brackets (counted in C; ``-1``: no bound) is wrapped undecoded,
``message_class(data)``; anything else (more brackets than the bound, which needs the exact depth scan, or a body
that is not ``bytes``) answers ``None``, and the caller's pure-Python code decides, with its own errors.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE


def lazy_message(data, Py_ssize_t max_depth, message_class):
    """``message_class(data)``, or ``None`` for the pure-Python code to decide (see the module docstring)."""
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
    return message_class(data)
