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
