# cython: language_level=3
"""CRC-32C for the compiled modules that check or write journal records (``cimport``-ed; the C is in crc32c.h):
the CPU's crc32 instruction where it has one, else tables. Each module calls ``broker_crc32c_init()`` once at
import and has its own ``broker_crc32c_hw`` switch (the tests clear it to run the table path)."""

from libc.stdint cimport uint8_t, uint32_t


cdef extern from "crc32c.h":
    int broker_crc32c_hw
    void broker_crc32c_init()
    uint32_t broker_crc32c_extend(uint32_t crc, const uint8_t *p, size_t length)
