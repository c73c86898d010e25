# cython: language_level=3
"""Compiled twins of the usual cases of a JSON publish body (see :mod:`broker.speedups`): the keyed parse
(:meth:`JsonMessageType.parse(data, keyed=True, max_depth=N) <broker.messagetypes._json.JsonMessageType.parse>`)
and the plain-topic wrapper (:meth:`JsonMessageType.lazy <broker.messagetypes._json.JsonMessageType.lazy>`, twin
``_lazy_python``).

:func:`parse_object` decodes a publish's JSON object body in one call: the nesting bound checked by counting
brackets in C, ``orjson.loads``, the top-level check and the message built. Anything else (a body with more
brackets than the bound, which needs the exact depth scan; text orjson refuses; a body that may hold an integer
wider than 64 bits, which orjson would turn into a float; a top level that is not an object; a body that is not
``bytes``) answers ``None``, and the caller's pure-Python code decides, with its own results and errors.

:func:`loads` is ``orjson.loads`` kept exact for integers wider than 64 bits (twin ``_json._loads_python``).

:func:`lazy_message` wraps a publish body to a topic without a SOW undecoded, ``message_class(data)``, when it is
``bytes`` within the same bracket bound; anything else answers ``None`` for the pure-Python code.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from broker.speedups.cbytes cimport brackets_within, wide_integer
from broker.speedups.jsonobject cimport json_object

import json

import orjson

cdef object _loads = orjson.loads
cdef object _std_loads = json.loads
cdef object _JSONDecodeError = orjson.JSONDecodeError


cdef inline bint _wide(bytes data):
    """Whether ``data`` may hold an integer wider than orjson keeps exact (``cbytes.wide_integer``)."""
    return wide_integer(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


cdef inline bint _within_bound(bytes data, Py_ssize_t max_depth):
    """Whether ``data`` has at most ``max_depth`` opening brackets (``-1``: no bound). More brackets than the
    bound do not mean the nesting is too deep: the caller's exact depth scan decides those."""
    return brackets_within(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), max_depth)


def loads(data):
    """``orjson.loads(data)``, with integers wider than 64 bits kept exact (orjson turns them into floats): a
    body that may hold one (see ``_wide``) is parsed again by the standard library, unless it nests too deep
    for it. Raises what ``orjson.loads`` raises."""
    doc = _loads(data)
    if type(data) is bytes and _wide(data):
        try:
            return _std_loads(data)
        except RecursionError:
            return doc
    return doc


def parse_object(data, Py_ssize_t max_depth, message_class):
    """``message_class(data, doc)`` for a ``bytes`` body that holds a JSON object with at most ``max_depth``
    brackets (``-1``: no bound), or ``None`` for the pure-Python code to decide (see the module docstring).
    """
    doc = json_object(data, max_depth, _loads, _JSONDecodeError)
    return None if doc is None else message_class(data, doc)


def lazy_message(data, Py_ssize_t max_depth, message_class):
    """``message_class(data)`` for a ``bytes`` body with at most ``max_depth`` brackets (``-1``: no bound), or
    ``None`` for the pure-Python code to decide (see the module docstring)."""
    if type(data) is not bytes or not _within_bound(data, max_depth):
        return None
    return message_class(data)
