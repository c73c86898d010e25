# cython: language_level=3
"""Compiled twin of a bookmark replay's read loop: journal records straight to delivery frames.

:class:`FrameRun` does what :func:`broker.txlog.records.decode_run` does with a replay's
:class:`~broker.server.replay_frames.FrameMaker` (every check of each record, its CRC included, and the
delivery frame of each record the subscription gets), in one C loop over the read buffer. Any record off the
common path (a first topic or message type, a value that is not plain, a command other than a publish, a bad or
cut record) is handed to that Python function for that one record, so results and errors are the same by
construction; ``tests/speedups/test_speedups_replayframes.py`` checks it on arbitrary input.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.string cimport memcmp

from broker.speedups.cbytes cimport plain_bytes, put
from broker.speedups.crc32c cimport broker_crc32c_extend, broker_crc32c_hw, broker_crc32c_init

broker_crc32c_init()
#: Whether the CPU has the CRC-32C instruction (``use_hardware_crc`` may switch it off for the tests).
cdef bint _CPU_CRC = broker_crc32c_hw

#: The sizes of the record header (format versions 1 and 2), as in :mod:`broker.txlog.records`.
cdef enum:
    MIN_HEADER = 56
    HEADER_V2 = 64
    PUBLISH = 1
    DELTA_PUBLISH = 2
    TOPICS_MAX = 1024

cdef uint64_t MAX_RECORD = 1 << 30
cdef uint64_t MAX_PAYLOAD = 0xFFFFFFFF


def hardware_crc() -> bool:
    """Whether this machine's CRC-32C instruction is used (else slicing-by-8 tables)."""
    return bool(broker_crc32c_hw)


def use_hardware_crc(bint on) -> bool:
    """Use the CRC-32C instruction (when the CPU has it) or not (the tests cover both); the previous setting."""
    global broker_crc32c_hw
    before = bool(broker_crc32c_hw)
    broker_crc32c_hw = on and _CPU_CRC
    return before


cdef inline uint64_t _le(const uint8_t *p, int n):
    cdef uint64_t v = 0
    cdef int i
    for i in range(n - 1, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef class FrameRun:
    """Decodes runs of records into a replay's deliveries (see the module).

    Args:
        maker: The replay's ``FrameMaker``: called by ``slow`` for the records off the common path, and asked
            ``maker.topic_state(raw_topic)`` once per topic: ``False`` when the subscription does not get it,
            the frames' header up to the bookmark's sequence when it does and that header is plain, else
            ``None`` (every record of the topic goes to ``slow``).
        delivery: The type of what is built per record, ``delivery(sequence, timestamp_ns, frame)`` (a named
            tuple, built as ``tuple.__new__`` builds it).
        slow: ``broker.txlog.records.decode_run``.
    """

    cdef object maker, delivery, slow
    cdef dict topics
    cdef bytes last_topic, last_mtype
    cdef object last_state

    def __init__(self, maker, delivery, slow):
        self.maker = maker
        self.delivery = delivery
        self.slow = slow
        self.topics = {}
        self.last_topic = None
        self.last_mtype = None
        self.last_state = None

    def run(self, bytes buf, Py_ssize_t pos, Py_ssize_t base, Py_ssize_t most=-1):
        """``decode_run(buf, pos, base, most, maker)``: ``(deliveries, offsets, end, problem)``."""
        cdef list items = [], offsets = []
        cdef Py_ssize_t size = PyBytes_GET_SIZE(buf), end
        while most:
            if size == pos:
                break
            end = self._one(buf, size, pos, base, items, offsets)
            if end < 0:  # off the common path: this record through the Python loop
                one, where, end, problem = self.slow(buf, pos, base, 1, self.maker)
                if not one:
                    return items, offsets, pos, problem
                items.append(one[0])
                offsets.append(where[0])
                self._learn(buf, pos)
            pos = end
            most -= 1
        return items, offsets, pos, None

    cdef Py_ssize_t _one(self, bytes buf, Py_ssize_t size, Py_ssize_t pos, Py_ssize_t base, list items,
                         list offsets) except -2:
        """Decode the record at ``pos`` and add its delivery; its end, or -1 when it is off the common path."""
        cdef const uint8_t *b = <const uint8_t *>PyBytes_AS_STRING(buf)
        cdef uint64_t length, crc, seq, ts, tlen, klen, mlen, clen, dlen, end, start, frame_size
        cdef uint32_t actual
        cdef int version, cmd, digits
        cdef Py_ssize_t head_size
        cdef char number[24]
        cdef const uint8_t *k
        cdef const uint8_t *x
        cdef bytes head, frame, raw
        cdef object state
        cdef char *out
        if size - pos < MIN_HEADER:
            return -1  # the slow path reports the cut header
        length = _le(b + pos, 4)
        crc = _le(b + pos + 4, 4)
        cmd = b[pos + 40]
        version = b[pos + 41]
        tlen = _le(b + pos + 42, 2)
        klen = _le(b + pos + 44, 2)
        mlen = b[pos + 46]
        clen = _le(b + pos + 48, 2)
        dlen = _le(b + pos + 52, 4)
        if version == 2:
            start = pos + HEADER_V2
        elif version == 1:
            start = pos + MIN_HEADER
        else:
            return -1
        end = start + tlen + klen + mlen + clen + dlen
        if (end - pos != length or length > MAX_RECORD or end > <uint64_t>size
                or (cmd != PUBLISH and cmd != DELTA_PUBLISH)):
            return -1
        # The message type: the last valid record's, else the slow path (which checks its UTF-8).
        if (self.last_mtype is None or PyBytes_GET_SIZE(self.last_mtype) != <Py_ssize_t>mlen
                or memcmp(PyBytes_AS_STRING(self.last_mtype), b + start + tlen + klen, mlen) != 0):
            return -1
        if (self.last_topic is not None and PyBytes_GET_SIZE(self.last_topic) == <Py_ssize_t>tlen
                and memcmp(PyBytes_AS_STRING(self.last_topic), b + start, tlen) == 0):
            state = self.last_state
        else:
            raw = PyBytes_FromStringAndSize(<const char *>b + start, tlen)
            state = self.topics.get(raw, None)
            if state is None:
                return -1  # a first topic, or one whose frames are not plain
            self.last_topic = raw
            self.last_state = state
        k = b + start + tlen
        x = k + klen + mlen
        if state is not False and not (plain_bytes(k, klen) and plain_bytes(x, clen)):
            return -1
        actual = broker_crc32c_extend(broker_crc32c_extend(0, b + pos, 4), b + pos + 8, length - 8)
        if actual != crc:
            return -1  # the slow path reports the mismatch
        seq = _le(b + pos + 8, 8)
        ts = _le(b + pos + 16, 8)
        if state is False:
            items.append(tuple.__new__(self.delivery, (seq, ts, None)))
            offsets.append(base + pos)
            return end
        head = <bytes>state
        head_size = PyBytes_GET_SIZE(head)
        digits = snprintf(number, 24, b"%llu", <unsigned long long>seq)
        frame_size = head_size + digits + 3  # |"}
        if klen and clen:
            frame_size += 6 + klen + 7 + clen + 1  # |","k":"K","x":"X"}
        elif klen or clen:
            frame_size += 6 + klen + clen + 1  # |","k":"K"}
        frame_size += dlen
        if frame_size > MAX_PAYLOAD:
            return -1  # the slow path raises the Python encoder's error
        frame = PyBytes_FromStringAndSize(NULL, 4 + frame_size)
        out = PyBytes_AS_STRING(frame)
        out[0] = <char>((frame_size >> 24) & 0xFF)
        out[1] = <char>((frame_size >> 16) & 0xFF)
        out[2] = <char>((frame_size >> 8) & 0xFF)
        out[3] = <char>(frame_size & 0xFF)
        out = put(out + 4, PyBytes_AS_STRING(head), head_size)
        out = put(out, number, digits)
        if klen:
            out = put(out, b'|","k":"', 8)
            out = put(out, k, klen)
            if clen:
                out = put(out, b'","x":"', 7)
                out = put(out, x, clen)
            out = put(out, b'"}', 2)
        elif clen:
            out = put(out, b'|","x":"', 8)
            out = put(out, x, clen)
            out = put(out, b'"}', 2)
        else:
            out = put(out, b'|"}', 3)
        put(out, x + clen, dlen)
        items.append(tuple.__new__(self.delivery, (seq, ts, frame)))
        offsets.append(base + pos)
        return end

    cdef void _learn(self, bytes buf, Py_ssize_t pos) except *:
        """Remember the message type and topic of the valid record at ``pos`` for the C loop."""
        cdef const uint8_t *b = <const uint8_t *>PyBytes_AS_STRING(buf)
        cdef Py_ssize_t start = pos + (HEADER_V2 if b[pos + 41] == 2 else MIN_HEADER)
        cdef Py_ssize_t tlen = <Py_ssize_t>_le(b + pos + 42, 2)
        cdef Py_ssize_t at = start + tlen + <Py_ssize_t>_le(b + pos + 44, 2)
        self.last_mtype = buf[at : at + b[pos + 46]]
        raw = buf[start : start + tlen]
        if raw not in self.topics:
            if len(self.topics) >= TOPICS_MAX:
                self.topics.clear()
            self.topics[raw] = self.maker.topic_state(raw)
        self.last_topic = None
