# cython: language_level=3
"""Byte helpers shared by the compiled frame builders (``cimport``-ed; inline, so nothing is called at run time)."""

from libc.stdint cimport uint8_t
from libc.string cimport memcpy


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


cdef inline bint brackets_within(const char *p, Py_ssize_t n, Py_ssize_t max_depth) noexcept:
    """Whether the ``n`` bytes at ``p`` hold at most ``max_depth`` opening brackets (``[``, ``{``; ``-1``: no bound):
    a JSON text that does is nested no deeper than that (one that does not may still be: an exact scan decides)."""
    cdef Py_ssize_t i, brackets = 0
    cdef char c
    if max_depth < 0:
        return True
    for i in range(n):
        c = p[i]
        if c == b'[' or c == b'{':
            brackets += 1
    return brackets <= max_depth
