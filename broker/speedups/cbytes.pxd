# cython: language_level=3
"""Byte helpers shared by the compiled frame builders (``cimport``-ed; inline, so nothing is called at run time)."""

from libc.stdint cimport uint8_t
from libc.string cimport memchr, memcpy


cdef inline bint plain_bytes(const uint8_t *p, Py_ssize_t n) noexcept:
    """Whether the ``n`` bytes at ``p`` are printable ASCII without ``"``, ``\\``, ``[``, ``{``: what a header value
    may hold to be copied between quotes as is (``broker.protocol._frames._NOT_PLAIN``)."""
    cdef Py_ssize_t i
    cdef uint8_t c
    for i in range(n):
        c = p[i]
        if c < 0x20 or c > 0x7e or c == 0x22 or c == 0x5b or c == 0x5c or c == 0x7b:
            return False
    return True


cdef inline char* put(char* out, const void* text, Py_ssize_t n) noexcept:
    """Copy ``n`` bytes to ``out``; the position after them."""
    memcpy(out, text, n)
    return out + n


cdef inline Py_ssize_t _count_within(const char *p, Py_ssize_t n, char c, Py_ssize_t bound) noexcept:
    """The number of bytes ``c`` among the ``n`` at ``p``, counted up to ``bound + 1`` (then the count stops)."""
    cdef const char *end = p + n
    cdef const char *at
    cdef Py_ssize_t count = 0
    while p < end and count <= bound:
        at = <const char *>memchr(p, c, end - p)
        if at == NULL:
            break
        count += 1
        p = at + 1
    return count


cdef inline bint brackets_within(const char *p, Py_ssize_t n, Py_ssize_t max_depth) noexcept:
    """Whether the ``n`` bytes at ``p`` hold at most ``max_depth`` opening brackets (``[``, ``{``; ``-1``: no bound):
    a JSON text that does is nested no deeper than that (one that does not may still be: an exact scan decides).

    Counted with ``memchr`` (the C library's vectorised search), one pass per bracket: a body holds few brackets,
    so this reads it in wide steps instead of a byte at a time."""
    cdef Py_ssize_t braces
    if max_depth < 0 or n <= max_depth:
        return True
    braces = _count_within(p, n, b'{', max_depth)
    if braces > max_depth:
        return False
    return braces + _count_within(p, n, b'[', max_depth - braces) <= max_depth


cdef inline bint wide_integer(const char *p, Py_ssize_t n) noexcept:
    """Whether the ``n`` bytes at ``p`` have a run of 20 digits, or of 19 after a ``-``: an integer literal that may
    be beyond what orjson keeps exact (-2**63 .. 2**64-1), or digits in a string or a fraction (then the exact parse
    agrees with orjson). A nanosecond timestamp (19 digits) is not wide. Every 19th byte is looked at: any 19
    consecutive bytes hold one of them, and only a run through a digit seen there is measured."""
    cdef Py_ssize_t i, s, e
    for i in range(0, n, 19):
        if not (b'0' <= p[i] <= b'9'):
            continue
        s = i
        while s > 0 and b'0' <= p[s - 1] <= b'9':
            s -= 1
        e = i + 1
        while e < n and b'0' <= p[e] <= b'9':
            e += 1
        if e - s >= 20 or (e - s == 19 and s > 0 and p[s - 1] == b'-'):
            return True
    return False
