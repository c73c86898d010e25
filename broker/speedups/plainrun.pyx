# cython: language_level=3
"""Compiled twin of the fan-out's plain-topic pass over a run of publishes (``broker.engine.fanout._plain_items``):
the re-send check, the depth check and the delivery items, in one C loop. A JSON body within the depth bound by
its bracket count is accepted here; every other body goes to the message type's ``lazy`` (its errors included),
as in the Python loop. ``tests/server/test_server_plain_run.py`` checks both on arbitrary runs.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from broker.errors import BrokerError

from broker.speedups.cbytes cimport brackets_within


def plain_items(messages, Py_ssize_t start, Py_ssize_t end, list results, high, bint named, duplicate,
                lazy, max_depth, bint json_bodies):
    """``(items, received, high, top)``: see ``broker.engine.fanout._plain_items``."""
    cdef list items = []
    cdef Py_ssize_t i, received = 0, bound = -1 if max_depth is None else max_depth
    cdef tuple message
    cdef object body, seq, x, top = 0
    for i in range(start, end):
        message = messages[i]
        body = message[1]
        seq = message[3]
        if seq and named and seq <= high:
            results[i] = duplicate
            continue
        received += 1
        if lazy is not None and not (json_bodies and type(body) is bytes
                                     and brackets_within(PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body), bound)):
            try:
                lazy(body, max_depth=max_depth)
            except BrokerError as exc:
                results[i] = exc
                continue
        x = message[5]
        items.append((body, None, None, x or None))
        if seq:
            if seq > high:
                high = seq
            if seq > top:
                top = seq
    return items, received, high, top
