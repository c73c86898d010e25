# cython: language_level=3
"""The compiled keyed parse's test of a JSON publish body, shared by ``jsonbody.pyx`` (the parsed message) and
``publish.pyx`` (the keyed run); inline, so nothing is called at run time."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from broker.speedups.cbytes cimport brackets_within, wide_integer

cdef enum:
    #: broker.messagetypes._base.LARGE_MESSAGE: a body this long is left to the Python code, which scans it for the
    #: members it reads (broker.messagetypes._jsonmembers) instead of decoding it whole on the event loop.
    LARGE_MESSAGE = 64 * 1024


cdef inline object json_object(object data, Py_ssize_t max_depth, object loads, object decode_error):
    """The decoded JSON object of ``data`` when it is ``bytes`` shorter than ``LARGE_MESSAGE`` with at most
    ``max_depth`` brackets (``-1``: no bound), no integer that may be wider than orjson keeps exact, text ``loads``
    takes and an object at the top; ``None`` otherwise (the caller's pure-Python code decides those, with its own
    results and errors)."""
    if type(data) is not bytes or PyBytes_GET_SIZE(data) >= LARGE_MESSAGE \
            or not brackets_within(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), max_depth) \
            or wide_integer(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data)):
        return None
    try:
        doc = loads(data)
    except decode_error:
        return None
    return doc if type(doc) is dict else None
