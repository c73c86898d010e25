# cython: language_level=3
"""Compiled twins of the per-frame loops of the session's publish batch (:mod:`broker.server.publish_batch`):

- :func:`batch_messages`: each frame's :data:`~broker.engine.publish.PublishMessage`, the entitlement and
  publish-sequence checks (``_batch_messages_python``), its header fields read from the header's own dict;
- :func:`failures`: the positions of the engine's results that are not sequences (``_failures_python``).

Both give what their twins give on every input (``tests/server/test_server_batch_fields.py``).
"""

from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject, PyObject_GenericGetDict

from broker.errors import BrokerError

cdef object _HEADER = None


cdef inline object _field(dict fields, str name):
    """``header.<name>`` of a :class:`Header` whose instance dict is ``fields`` (an absent field reads ``None``)."""
    cdef PyObject *value = PyDict_GetItem(fields, name)
    return None if value == NULL else <object>value


def batch_messages(list frames, entitled, check_sequence, list messages, list accepted, dict refused):
    """``broker.server.publish_batch._batch_messages_python``, compiled: whether an accepted header asks for acks."""
    global _HEADER
    if _HEADER is None:
        from broker.protocol._header import Header
        _HEADER = Header
    cdef Py_ssize_t position
    cdef object frame, header, command, seq, high = 0
    cdef dict fields
    cdef bint acked = False
    for position in range(len(frames)):
        frame = frames[position]
        header = frame.header
        if type(header) is not _HEADER:  # read as Python reads it (nothing but Header comes from the decoder)
            fields = {name: getattr(header, name) for name in
                      ("command", "seq", "topic", "sow_key", "correlation_id", "expiration", "ack_type")}
        else:
            fields = PyObject_GenericGetDict(header, NULL)
        command = _field(fields, "command")
        seq = _field(fields, "seq")
        if entitled is not None or seq:
            try:
                if entitled is not None:
                    entitled(command, header)
                if seq:
                    if not (seq <= high + 1 and high):  # one past the last: within any jump limit
                        check_sequence(seq, high)
                    if seq > high:
                        high = seq
            except BrokerError as exc:
                refused[position] = exc
                continue
        PyList_Append(messages, (_field(fields, "topic"), frame.body, command == "delta_publish", seq,
                                 _field(fields, "sow_key"), _field(fields, "correlation_id"),
                                 _field(fields, "expiration")))
        PyList_Append(accepted, header)
        if not acked and _field(fields, "ack_type"):
            acked = True
    return acked


def failures(list results):
    """``broker.server.publish_batch._failures_python``, compiled: the positions whose result is not an ``int``."""
    cdef Py_ssize_t i
    cdef list out = []
    for i in range(len(results)):
        if type(results[i]) is not int:
            out.append(i)
    return out
