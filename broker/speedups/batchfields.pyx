# cython: language_level=3
"""Compiled twins of the per-frame loops of the session's publish batch (:mod:`broker.server.publish_batch`):

- :func:`batch_messages`: each frame's :data:`~broker.engine.publish.PublishMessage`, the entitlement and
  publish-sequence checks (``_batch_messages_python``), its header fields read from the header's own dict;
- :func:`failures`: the positions of the engine's results that are not sequences (``_failures_python``).

Both give what their twins give on every input (``tests/server/test_server_batch_fields.py``).
"""

from cpython.dict cimport PyDict_GetItemWithError, PyDict_Next
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject, PyObject_GenericGetDict

from broker.errors import BrokerError

cdef object _HEADER = None
#: The fields read here, by their canonical names (a header's dict keys are these same interned strings).
cdef str _COMMAND = "command", _SEQ = "seq", _TOPIC = "topic", _SOW_KEY = "sow_key"
cdef str _CORRELATION_ID = "correlation_id", _EXPIRATION = "expiration", _ACK_TYPE = "ack_type"
cdef frozenset _NAMES = frozenset([_COMMAND, _SEQ, _TOPIC, _SOW_KEY, _CORRELATION_ID, _EXPIRATION, _ACK_TYPE])


cdef inline object _value(PyObject *value):
    return None if value == NULL else <object>value


cdef bint _read_fields(dict fields, PyObject **out) except -1:
    """The 7 fields into ``out`` (command, seq, topic, sow_key, correlation_id, expiration, ack_type; absent:
    ``NULL``; borrowed from ``fields``) in one pass over the header's dict, its keys matched by identity; ``False``
    when a key is one of them but not the same object (not interned): the caller looks them up by value."""
    cdef Py_ssize_t i = 0
    cdef PyObject *key
    cdef PyObject *value
    cdef int n
    for n in range(7):
        out[n] = NULL
    while PyDict_Next(fields, &i, &key, &value):
        if key == <PyObject *>_COMMAND:
            out[0] = value
        elif key == <PyObject *>_SEQ:
            out[1] = value
        elif key == <PyObject *>_TOPIC:
            out[2] = value
        elif key == <PyObject *>_SOW_KEY:
            out[3] = value
        elif key == <PyObject *>_CORRELATION_ID:
            out[4] = value
        elif key == <PyObject *>_EXPIRATION:
            out[5] = value
        elif key == <PyObject *>_ACK_TYPE:
            out[6] = value
        elif <object>key in _NAMES:
            return False
    return True


def batch_messages(list frames, entitled, check_sequence, list messages, list accepted, dict refused):
    """``broker.server.publish_batch._batch_messages_python``, compiled: whether an accepted header asks for acks."""
    global _HEADER
    if _HEADER is None:
        from broker.protocol._header import Header
        _HEADER = Header
    cdef Py_ssize_t position
    cdef object frame, header, command, seq, ack_type, high = 0
    cdef tuple message
    cdef PyObject *got[7]
    cdef dict fields
    cdef bint acked = False
    for position in range(len(frames)):
        frame = frames[position]
        header = frame.header
        if type(header) is not _HEADER:  # read as Python reads it (nothing but Header comes from the decoder)
            fields = {name: getattr(header, name) for name in _NAMES}
        else:
            fields = PyObject_GenericGetDict(header, NULL)
        if not _read_fields(fields, got):
            for n, name in enumerate((_COMMAND, _SEQ, _TOPIC, _SOW_KEY, _CORRELATION_ID, _EXPIRATION, _ACK_TYPE)):
                got[n] = PyDict_GetItemWithError(fields, name)
        command = _value(got[0])
        seq = _value(got[1])
        message = (_value(got[2]), frame.body, command == "delta_publish", seq, _value(got[3]), _value(got[4]),
                   _value(got[5]))
        ack_type = _value(got[6])
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
        PyList_Append(messages, message)
        PyList_Append(accepted, header)
        if not acked and ack_type:
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
