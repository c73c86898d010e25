# cython: language_level=3
"""Where the top-level members of a JSON body are, without decoding it: the scan behind
:mod:`broker.messagetypes._jsonmembers` (a large message whose consumers read a few top-level members).

:func:`scan` walks the whole text in C (``jsonmembers.h``), checking it as the broker's decode does (what
``broker.messagetypes._json._loads`` refuses it refuses, what it takes it takes) and building nothing: a string
is skipped 16 bytes at a time, a nested object or array by its brackets. It runs without the GIL. It answers
where the wanted members' values are (the last of duplicate keys, as the decoders keep) and where the first
members are; the caller decodes just those spans. There is no pure-Python twin: without this module the caller
decodes the whole body, which gives the same values.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc


cdef extern from "jsonmembers.h" nogil:
    enum:
        JM_OK
        JM_INVALID
        JM_UNSURE
        JM_TOO_DEEP

    ctypedef struct jm_want:
        const unsigned char *name
        Py_ssize_t len
        Py_ssize_t start
        Py_ssize_t end

    ctypedef struct jm_member:
        Py_ssize_t key_start
        Py_ssize_t key_end
        int escaped
        Py_ssize_t start
        Py_ssize_t end

    ctypedef struct jm_scan:
        const unsigned char *p
        Py_ssize_t n
        jm_want *wants
        Py_ssize_t nwants
        Py_ssize_t max_want
        jm_member *table
        Py_ssize_t table_cap
        Py_ssize_t max_digits
        Py_ssize_t max_depth
        Py_ssize_t root_at
        Py_ssize_t members
        Py_ssize_t error_at
        const char *error

    int jm_run(jm_scan *s)


#: :func:`scan`'s outcomes.
OK = JM_OK
INVALID = JM_INVALID
UNSURE = JM_UNSURE
TOO_DEEP = JM_TOO_DEEP


def scan(bytes data, tuple names, Py_ssize_t table, Py_ssize_t max_digits, Py_ssize_t max_depth):
    """Check ``data`` as a JSON text and find its top-level members.

    Args:
        data: The JSON text.
        names: The wanted member names, each as ``bytes`` (UTF-8, surrogates encoded with ``surrogatepass``).
        table: How many members (in order, duplicates included) to list.
        max_digits: An integer literal with more digits is refused, as the standard library refuses to
            convert it (``sys.get_int_max_str_digits()``); ``0``: no limit.
        max_depth: Nesting deeper than this stops the scan (``{}`` is depth 1); ``-1``: no bound.

    Returns:
        ``(outcome, ...)``: ``(UNSURE, 0, None, None)`` when the text must be decoded whole to decide (it may be
        UTF-16 or UTF-32, or nests more than 256 levels); ``(TOO_DEEP, 0, None, None)`` when it nests deeper
        than ``max_depth`` before any error; ``(INVALID, position, reason, None)`` when it is not JSON the broker
        accepts; else ``(OK, root_at, found, members)``: where the top-level value starts; for each name,
        ``(start, end)`` of its last value's text or ``None``; and ``(key_start, key_end, escaped, start,
        end)`` for each of the top-level object's first ``table`` members (the key's text between its quotes,
        whether it has an escape, the value's text), or ``None`` when it has more members than that.
    """
    cdef jm_scan s
    cdef Py_ssize_t k, count = len(names)
    cdef int outcome
    cdef bytes name
    s.p = <const unsigned char *>PyBytes_AS_STRING(data)
    s.n = PyBytes_GET_SIZE(data)
    s.nwants = count
    s.max_want = 0
    s.table_cap = table if table > 0 else 0
    s.max_digits = max_digits
    s.max_depth = max_depth
    s.wants = <jm_want *>PyMem_Malloc(sizeof(jm_want) * (count if count else 1))
    s.table = <jm_member *>PyMem_Malloc(sizeof(jm_member) * (s.table_cap if s.table_cap else 1))
    if s.wants == NULL or s.table == NULL:
        PyMem_Free(s.wants)
        PyMem_Free(s.table)
        raise MemoryError()
    try:
        for k in range(count):
            name = names[k]
            s.wants[k].name = <const unsigned char *>PyBytes_AS_STRING(name)
            s.wants[k].len = PyBytes_GET_SIZE(name)
            s.wants[k].start = -1
            s.wants[k].end = -1
            if s.wants[k].len > s.max_want:
                s.max_want = s.wants[k].len
        with nogil:
            outcome = jm_run(&s)
        if outcome == JM_UNSURE or outcome == JM_TOO_DEEP:
            return (outcome, 0, None, None)
        if outcome == JM_INVALID:
            return (outcome, s.error_at, s.error.decode("ascii"), None)
        found = [None if s.wants[k].start < 0 else (s.wants[k].start, s.wants[k].end) for k in range(count)]
        members = None
        if s.members <= s.table_cap:
            members = [(s.table[k].key_start, s.table[k].key_end, bool(s.table[k].escaped), s.table[k].start,
                        s.table[k].end) for k in range(s.members)]
        return (outcome, s.root_at, found, members)
    finally:
        PyMem_Free(s.wants)
        PyMem_Free(s.table)
