# cython: language_level=3
"""Compiled twins of the per-message work of a publish (see :mod:`broker.speedups`).

- :func:`encode_fields`: a journal record (:func:`broker.txlog.records.encode_fields`), header, fields and
  CRC-32C in one allocation, and :func:`encode_entries` the journal writer's loop over a batch of them;
- :func:`default_key`: the ``default`` key generator's key (:mod:`plugins.keygen.default`), BLAKE2b-64 in C;
  :func:`default_key_doc` the same from a decoded JSON object's top-level names, without the message's ``get``;
- :func:`record_value`: a SOW record's stored value (:meth:`broker.sow.record.SowRecord.encode`), and
  :func:`record_from_value` the record back (:meth:`broker.sow.record.SowRecord.decode`);
- :func:`keyed_scan` and :func:`stored_values`: a run of plain JSON publishes to a SOW topic nobody reads
  (:meth:`broker.engine.publish.PublishSteps._keyed_run`): parse, key, previous record and journal entry per
  message in one pass, then the stored values once the journal has numbered them.

Each handles the usual exact types (``bytes``, ``int`` within range, ``str`` values) and hands anything else
to the pure-Python code, so both give the same results and the same errors on every input.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_GET_LENGTH
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from cpython.dict cimport PyDict_GetItemWithError
from cpython.object cimport PyObject

from broker.speedups.crc32c cimport broker_crc32c_extend, broker_crc32c_hw, broker_crc32c_init
from broker.speedups.jsonobject cimport json_object

import orjson

cdef object _json_loads = orjson.loads
cdef object _JSONDecodeError = orjson.JSONDecodeError

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t* size) except NULL
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)
    object PyUnicode_DecodeASCII(const char *s, Py_ssize_t size, const char *errors)


cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>

    static const uint64_t broker_b2_iv[8] = {
        0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
        0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};
    static const uint8_t broker_b2_sigma[12][16] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
        {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
        {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
        {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
        {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
        {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
        {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
        {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
        {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
        {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
        {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

    #define BROKER_ROTR64(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
    #define BROKER_B2G(a, b, c, d, x, y) do { \\
        a = a + b + (x); d = BROKER_ROTR64(d ^ a, 32); c = c + d; b = BROKER_ROTR64(b ^ c, 24); \\
        a = a + b + (y); d = BROKER_ROTR64(d ^ a, 16); c = c + d; b = BROKER_ROTR64(b ^ c, 63); } while (0)

    static void broker_b2_compress(uint64_t h[8], const uint8_t *block, uint64_t t, int last) {
        uint64_t m[16], v[16];
        for (int i = 0; i < 16; i++) {
            uint64_t w = 0;
            for (int j = 7; j >= 0; j--) w = (w << 8) | block[i * 8 + j];
            m[i] = w;
        }
        for (int i = 0; i < 8; i++) { v[i] = h[i]; v[i + 8] = broker_b2_iv[i]; }
        v[12] ^= t;
        if (last) v[14] = ~v[14];
        for (int r = 0; r < 12; r++) {
            const uint8_t *s = broker_b2_sigma[r];
            BROKER_B2G(v[0], v[4], v[8], v[12], m[s[0]], m[s[1]]);
            BROKER_B2G(v[1], v[5], v[9], v[13], m[s[2]], m[s[3]]);
            BROKER_B2G(v[2], v[6], v[10], v[14], m[s[4]], m[s[5]]);
            BROKER_B2G(v[3], v[7], v[11], v[15], m[s[6]], m[s[7]]);
            BROKER_B2G(v[0], v[5], v[10], v[15], m[s[8]], m[s[9]]);
            BROKER_B2G(v[1], v[6], v[11], v[12], m[s[10]], m[s[11]]);
            BROKER_B2G(v[2], v[7], v[8], v[13], m[s[12]], m[s[13]]);
            BROKER_B2G(v[3], v[4], v[9], v[14], m[s[14]], m[s[15]]);
        }
        for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
    }

    /* BLAKE2b with an 8-byte digest and no key (hashlib.blake2b(data, digest_size=8)); the digest read as a
       big-endian unsigned integer. (Messages up to 2**64 bytes: the counter's high word stays 0.) */
    static uint64_t broker_blake2b64(const uint8_t *data, size_t len) {
        uint64_t h[8];
        uint8_t block[128];
        uint64_t t = 0;
        for (int i = 0; i < 8; i++) h[i] = broker_b2_iv[i];
        h[0] ^= 0x01010000ULL ^ 8;
        while (len > 128) {
            t += 128;
            broker_b2_compress(h, data, t, 0);
            data += 128;
            len -= 128;
        }
        memset(block, 0, sizeof block);
        memcpy(block, data, len);
        t += len;
        broker_b2_compress(h, block, t, 1);
        uint64_t out = 0;
        for (int i = 0; i < 8; i++) out = (out << 8) | ((h[0] >> (8 * i)) & 0xff);
        return out;
    }
    """
    uint64_t broker_blake2b64(const uint8_t *data, size_t length)


broker_crc32c_init()

cdef enum:
    HEADER_SIZE = 64
    FORMAT_VERSION = 2
    RECORD_HEAD = 28  # a SOW record's fixed header: struct "<QQQHH"
cdef Py_ssize_t MAX_RECORD_SIZE = 1 << 30
_U64_MAX = 0xFFFFFFFFFFFFFFFF


cdef inline void _put16(uint8_t *p, uint64_t v):
    p[0] = v & 0xff
    p[1] = (v >> 8) & 0xff


cdef inline void _put32(uint8_t *p, uint64_t v):
    p[0] = v & 0xff
    p[1] = (v >> 8) & 0xff
    p[2] = (v >> 16) & 0xff
    p[3] = (v >> 24) & 0xff


cdef inline void _put64(uint8_t *p, uint64_t v):
    cdef int i
    for i in range(8):
        p[i] = (v >> (8 * i)) & 0xff


cdef inline bint _u64(object v):
    """Whether ``v`` is an exact int in [0, 2**64): the fast path's domain."""
    return type(v) is int and 0 <= v <= _U64_MAX


def crc32c_extend(uint32_t crc, bytes data, hardware=None):
    """``google_crc32c.extend(crc, data)`` (for the tests): with the CPU's crc32 instruction when it has one
    (``hardware``: ``True``/``False`` forces that path for this call, ``True`` only where the CPU has it)."""
    global broker_crc32c_hw
    cdef int chosen = broker_crc32c_hw
    if hardware is not None:
        broker_crc32c_hw = bool(hardware) and chosen
    try:
        return broker_crc32c_extend(crc, <const uint8_t *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    finally:
        broker_crc32c_hw = chosen


def crc32c_hardware():
    """Whether the journal's CRC-32C uses the CPU's crc32 instruction (SSE 4.2)."""
    return bool(broker_crc32c_hw)


def encode_entries(list raws, entries, first, last_ts, topic, publisher_hash, message_type):
    """:func:`broker.txlog.records._encode_entries_python` (the loop of
    :meth:`broker.txlog.writer.JournalWriter.append_many`), compiled: the same records appended to ``raws``, the
    same answer and errors. Anything but a list of 7-tuples is handed to the Python loop whole."""
    if type(entries) is not list or not all(type(e) is tuple and len(<tuple>e) == 7 for e in entries):
        from broker.txlog.records import _encode_entries_python
        return _encode_entries_python(raws, entries, first, last_ts, topic, publisher_hash, message_type)
    cdef Py_ssize_t i, n = len(entries)
    cdef tuple entry
    top = 0
    for i in range(n):
        entry = <tuple>(<list>entries)[i]
        ts = entry[6]
        if ts < last_ts:
            ts = last_ts
        pseq = entry[3]
        raws.append(encode_fields(first + i, ts, entry[0], topic, entry[1], entry[2], publisher_hash, pseq,
                                  message_type, entry[4], entry[5]))
        last_ts = ts
        if pseq > top:
            top = pseq
    return last_ts, top


cpdef bytes encode_fields(sequence, timestamp_ns, command, topic, data, sow_key, publisher_hash, publisher_seq,
                          message_type, correlation_id, expiration_ns=0):
    """:func:`broker.txlog.records.encode_fields`, compiled: the same bytes and the same errors."""
    if not (type(topic) is bytes and type(data) is bytes and type(sow_key) is bytes and type(message_type) is bytes
            and type(correlation_id) is bytes and _u64(sequence) and _u64(timestamp_ns) and _u64(publisher_hash)
            and _u64(publisher_seq) and _u64(expiration_ns) and type(command) is int and 0 <= command <= 255):
        from broker.txlog.records import _encode_fields_python
        return _encode_fields_python(sequence, timestamp_ns, command, topic, data, sow_key, publisher_hash,
                                     publisher_seq, message_type, correlation_id, expiration_ns)
    cdef Py_ssize_t tlen = PyBytes_GET_SIZE(topic), klen = PyBytes_GET_SIZE(sow_key)
    cdef Py_ssize_t mlen = PyBytes_GET_SIZE(message_type), clen = PyBytes_GET_SIZE(correlation_id)
    cdef Py_ssize_t dlen = PyBytes_GET_SIZE(data)
    if tlen > 0xFFFF or klen > 0xFFFF or clen > 0xFFFF:
        raise ValueError("topic, SOW key and correlation id must each be at most 65535 bytes")
    if mlen > 0xFF:
        raise ValueError("message type name must be at most 255 bytes")
    cdef Py_ssize_t length = HEADER_SIZE + tlen + klen + mlen + clen + dlen
    if length > MAX_RECORD_SIZE:
        raise ValueError(f"record of {length} bytes exceeds the journal maximum of {MAX_RECORD_SIZE}")
    out = PyBytes_FromStringAndSize(NULL, length)
    cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(out)
    _put32(p, length)
    _put64(p + 8, <uint64_t>sequence)
    _put64(p + 16, <uint64_t>timestamp_ns)
    _put64(p + 24, <uint64_t>publisher_hash)
    _put64(p + 32, <uint64_t>publisher_seq)
    p[40] = <uint8_t>(<int>command)
    p[41] = FORMAT_VERSION
    _put16(p + 42, tlen)
    _put16(p + 44, klen)
    p[46] = <uint8_t>mlen
    p[47] = 0
    _put16(p + 48, clen)
    _put16(p + 50, 0)
    _put32(p + 52, dlen)
    _put64(p + 56, <uint64_t>expiration_ns)
    cdef uint8_t *q = p + HEADER_SIZE
    memcpy(q, PyBytes_AS_STRING(topic), tlen)
    q += tlen
    memcpy(q, PyBytes_AS_STRING(sow_key), klen)
    q += klen
    memcpy(q, PyBytes_AS_STRING(message_type), mlen)
    q += mlen
    memcpy(q, PyBytes_AS_STRING(correlation_id), clen)
    q += clen
    memcpy(q, PyBytes_AS_STRING(data), dlen)
    cdef uint32_t crc = broker_crc32c_extend(0, p, 4)
    crc = broker_crc32c_extend(crc, p + 8, length - 8)
    _put32(p + 4, crc)
    return out


def record_value(record):
    """The stored value of a SOW record (:meth:`broker.sow.record.SowRecord.encode`: the fixed little-endian
    header, then bookmark, correlation id and data) in one allocation, or ``None`` when a field is not the usual
    exact type (``int`` within 64 bits, ``str`` without surrogates and at most 65,535 UTF-8 bytes, ``bytes``):
    then the Python code encodes it (and raises its errors).
    """
    ts, seq, exp = record.timestamp_ns, record.sequence, record.expire_at_ns
    bookmark, cid, data = record.bookmark, record.correlation_id, record.data
    if not (_u64(ts) and _u64(seq) and _u64(exp)) or type(bookmark) is not str or type(cid) is not str \
            or type(data) is not bytes:
        return None
    cdef Py_ssize_t blen, xlen
    cdef const char *bm
    cdef const char *x
    try:
        bm = PyUnicode_AsUTF8AndSize(bookmark, &blen)
        x = PyUnicode_AsUTF8AndSize(cid, &xlen)
    except UnicodeEncodeError:
        return None
    if blen > 0xFFFF or xlen > 0xFFFF:
        return None
    cdef Py_ssize_t dlen = PyBytes_GET_SIZE(data)
    out = PyBytes_FromStringAndSize(NULL, RECORD_HEAD + blen + xlen + dlen)
    cdef uint8_t *p = <uint8_t *>PyBytes_AS_STRING(out)
    _put64(p, ts)
    _put64(p + 8, seq)
    _put64(p + 16, exp)
    _put16(p + 24, blen)
    _put16(p + 26, xlen)
    memcpy(p + RECORD_HEAD, bm, blen)
    memcpy(p + RECORD_HEAD + blen, x, xlen)
    memcpy(p + RECORD_HEAD + blen + xlen, PyBytes_AS_STRING(data), dlen)
    return out


cdef inline uint64_t _get64(const uint8_t *p):
    cdef uint64_t v = 0
    cdef int i
    for i in range(7, -1, -1):
        v = (v << 8) | p[i]
    return v


def record_from_value(cls, key, value, data=None):
    """:meth:`broker.sow.record.SowRecord.decode` of a well-formed stored value, compiled: ``cls`` built from the
    fixed header, the bookmark and correlation id text and the data (``data`` when the caller split it off), or
    ``None`` when the value is not ``bytes``, is shorter than its header says, or its text is not UTF-8: then the
    Python code decodes it (and raises its errors)."""
    if type(value) is not bytes:
        return None
    cdef Py_ssize_t n = PyBytes_GET_SIZE(value)
    if n < RECORD_HEAD:
        return None
    cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(value)
    cdef Py_ssize_t blen = p[24] | (<Py_ssize_t>p[25] << 8), xlen = p[26] | (<Py_ssize_t>p[27] << 8)
    if RECORD_HEAD + blen + xlen > n:
        return None
    try:
        bookmark = PyUnicode_DecodeUTF8(<const char *>p + RECORD_HEAD, blen, NULL) if blen else ""
        cid = PyUnicode_DecodeUTF8(<const char *>p + RECORD_HEAD + blen, xlen, NULL) if xlen else ""
    except UnicodeDecodeError:
        return None
    cdef Py_ssize_t at = RECORD_HEAD + blen + xlen
    record = cls.__new__(cls)
    record.key = key
    record.data = PyBytes_FromStringAndSize(<const char *>p + at, n - at) if data is None else data
    record.timestamp_ns = _get64(p)
    record.sequence = _get64(p + 8)
    record.expire_at_ns = _get64(p + 16)
    record.bookmark = bookmark
    record.correlation_id = cid
    return record


def default_key(bytes domain_prefix, tuple fields, message):
    """The ``default`` generator's key of ``message`` (:meth:`DefaultKeyGenerator.generate`), or ``None`` when a
    value is not a ``str`` (without surrogates), ``int`` or ``bool``: then the caller's pure-Python code makes the
    key (and raises its errors).

    Args:
        domain_prefix: ``"<len>:<key domain>"`` as UTF-8.
        fields: The ``<Key>`` field paths.
        message: The parsed message (its ``get``).
    """
    get = message.get
    return _key_of(domain_prefix, [get(field) for field in fields])


def default_key_doc(bytes domain_prefix, tuple names, message):
    """:func:`default_key` of a JSON message whose ``<Key>`` paths are all top-level names (``/id``): the values
    are read from its decoded object (``message._doc``, a ``dict``) directly, as ``JsonMessage.get`` would
    resolve them. ``None`` when the message holds no decoded object or a value is not one :func:`default_key`
    takes: then the caller's code makes the key.

    Args:
        domain_prefix: ``"<len>:<key domain>"`` as UTF-8.
        names: The top-level names of the ``<Key>`` paths (``"id"`` for ``/id``).
        message: A ``JsonMessage``.
    """
    doc = message._doc
    if type(doc) is not dict:
        return None
    return _key_of(domain_prefix, [(<dict>doc).get(name) for name in names])


cdef object _key_of(bytes domain_prefix, list values, bint as_bytes=False):
    """The key of the key fields' ``values`` (see :func:`default_key`), or ``None``; encoded (``bytes``) when
    ``as_bytes``."""
    cdef Py_ssize_t total = PyBytes_GET_SIZE(domain_prefix), size
    cdef const char *utf8
    cdef Py_ssize_t n = len(values), i
    cdef char number[20]
    for i in range(n):
        value = values[i]
        if type(value) is not str:
            if _u64(value):  # written below by the digit loop: its JSON text is its decimal digits
                total += 20 + 21
                continue
            if type(value) is int:
                value = str(value)  # canonical_text: an integer's JSON text
            elif type(value) is bool:
                value = "true" if value else "false"
            else:
                return None
            values[i] = value
        try:
            PyUnicode_AsUTF8AndSize(value, &size)
        except UnicodeEncodeError:
            return None
        total += size + 21  # "<len>:" is at most 20 digits and a colon
    cdef char stack[512]
    cdef char *buf = stack
    if total > 512:
        buf = <char *>malloc(total)
        if buf == NULL:
            raise MemoryError()
    cdef Py_ssize_t at = PyBytes_GET_SIZE(domain_prefix)
    memcpy(buf, PyBytes_AS_STRING(domain_prefix), at)
    for value in values:
        if type(value) is int:  # within 64 bits (above)
            size = _decimal(number, <uint64_t>value)
            utf8 = number
            at += _decimal(buf + at, <uint64_t>size)
        else:
            utf8 = PyUnicode_AsUTF8AndSize(value, &size)
            at += _decimal(buf + at, <uint64_t>PyUnicode_GET_LENGTH(value))
        buf[at] = 58  # ":"
        at += 1
        memcpy(buf + at, utf8, size)
        at += size
    cdef uint64_t digest = broker_blake2b64(<const uint8_t *>buf, at)
    if buf != stack:
        free(buf)
    cdef char text[20]
    if as_bytes:
        return PyBytes_FromStringAndSize(text, _decimal(text, digest))
    return PyUnicode_DecodeASCII(text, _decimal(text, digest), NULL)  # str(digest)


cdef inline Py_ssize_t _decimal(char *out, uint64_t v) noexcept:
    """Write ``v`` in decimal at ``out`` (at most 20 bytes, as ``str(v)``); returns the length."""
    cdef char digits[20]
    cdef Py_ssize_t n = 0
    while True:
        digits[n] = <char>(48 + v % 10)
        n += 1
        v //= 10
        if v == 0:
            break
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = digits[n - 1 - i]
    return n


def keyed_scan(list messages, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_depth, bytes domain_prefix,
               tuple names, held, bint complete, high, bint named, long long now_ns, int command):
    """The first pass of :meth:`broker.engine.publish.PublishSteps._keyed_run` over ``messages[start:end]`` (plain
    publishes of JSON objects to one SOW topic with the ``default`` key of top-level names, no subscription or
    window on it): what ``_publish_run``'s loop works out per message, without its objects. Nothing is changed
    anywhere; ``None`` when any message needs the Python code (a delta, a body that is not a ``bytes`` JSON object
    within the bracket bound and without wide integers, a key value :func:`default_key` does not take, a
    correlation id that is not UTF-8 text, a key the cache does not hold while it is not complete, a replaced
    record that has expired): then the Python loop applies the whole run, with its own errors.

    Args:
        messages, start, end: The batch and the run (:data:`broker.engine.publish.PublishMessage` tuples).
        max_depth: The publisher's nesting bound (``-1``: none).
        domain_prefix, names: The key generator's recipe (:meth:`DefaultKeyGenerator.top_level_recipe`).
        held: The topic's record cache (:attr:`CachedStorage.held`: stored value or ``None`` per encoded key).
        complete: Whether the cache holds every record (a key it does not hold has none).
        high: The highest publish-store ``s`` applied or journaled for the publisher; ``named``: it has a name.
        now_ns: The batch's time: message ``i``'s timestamp is ``now_ns + i``.
        command: The journal command number of a publish.

    Returns:
        ``(indices, entries, xs, duplicates, received, inserts, new_keys, hits, absent, top)``: the applied
        messages' positions, their journal entries (:meth:`JournalWriter.append_many`) and correlation ids; the
        positions of re-sent publishes; the messages not re-sent; how many are inserts and how many distinct keys
        were absent; cache reads answered by a held entry and, while complete, by its absence; the highest ``s``.
    """
    cdef list indices = [], entries = [], xs = [], duplicates = []
    cdef set seen = set()
    cdef Py_ssize_t i, received = 0, inserts = 0, new_keys = 0, hits = 0, absent = 0, j, n = len(names)
    cdef PyObject *found
    cdef const uint8_t *v
    cdef uint64_t until
    cdef tuple message
    cdef list values
    top = 0
    for i in range(start, end):
        message = messages[i]  # a PublishMessage tuple (TypeError otherwise, as unpacking one would raise)
        if len(message) != 7:  # (no bounds checks in these modules) the Python loop's unpacking says what is wrong
            return None
        body = message[1]
        seq = message[3]
        if seq and named and seq <= high:
            duplicates.append(i)
            continue
        received += 1
        if message[2]:
            return None
        doc = json_object(body, max_depth, _json_loads, _JSONDecodeError)
        if doc is None:
            return None
        values = [(<dict>doc).get(names[j]) for j in range(n)]
        kb = _key_of(domain_prefix, values, True)
        if kb is None:
            return None
        x = message[5]
        if not x:
            x = ""
        elif type(x) is not str:
            return None
        try:
            xb = x.encode()
        except UnicodeEncodeError:
            return None
        if PyBytes_GET_SIZE(xb) > 0xFFFF:
            return None
        if kb in seen:  # an earlier message of the run wrote it: an update
            pass
        else:
            found = PyDict_GetItemWithError(held, kb)
            if found == NULL:
                if not complete:
                    return None
                absent += 1
                inserts += 1
                new_keys += 1
            elif <object>found is None:  # held as absent
                hits += 1
                inserts += 1
                new_keys += 1
            else:
                hits += 1
                if type(<object>found) is not bytes or PyBytes_GET_SIZE(<object>found) < RECORD_HEAD:
                    return None
                v = <const uint8_t *>PyBytes_AS_STRING(<object>found)
                until = _get64(v + 16)
                if until and until <= <uint64_t>now_ns:
                    return None
            seen.add(kb)
        if not seq:
            seq = 0
        entries.append((command, body, kb, seq, xb, 0, now_ns + i))
        indices.append(i)
        xs.append(x)
        if seq and seq > high:
            high = seq
        if seq > top:
            top = seq
    return indices, entries, xs, duplicates, received, inserts, new_keys, hits, absent, top


def stored_values(list entries, list xs, first, str prefix):
    """``(key, stored value)`` per entry of :func:`keyed_scan`, the journal having numbered them from ``first``
    (0: the topic is not logged, then sequence 0 and no bookmark): what :func:`record_value` makes of the records
    ``_publish_run`` would build (timestamp ``entry[6]``, bookmark ``f"{prefix}{sequence}|"``, no expiration)."""
    cdef list puts = []
    cdef Py_ssize_t j, n = len(entries), plen, blen, xlen, dlen
    cdef const char *pre = PyUnicode_AsUTF8AndSize(prefix, &plen)
    cdef const char *x
    cdef char bm[20 + 1]
    cdef uint8_t *p
    cdef tuple entry
    cdef uint64_t seq = first
    for j in range(n):
        entry = entries[j]
        blen = 0
        if seq:  # the bookmark, f"{prefix}{seq}|", its number by the digit loop
            blen = _decimal(bm, seq)
            bm[blen] = 124  # "|"
            blen += plen + 1
        x = PyUnicode_AsUTF8AndSize(xs[j], &xlen)  # at most 65,535 bytes (keyed_scan)
        data = entry[1]
        dlen = PyBytes_GET_SIZE(data)
        out = PyBytes_FromStringAndSize(NULL, RECORD_HEAD + blen + xlen + dlen)
        p = <uint8_t *>PyBytes_AS_STRING(out)
        _put64(p, entry[6])
        _put64(p + 8, seq)
        _put64(p + 16, 0)
        _put16(p + 24, blen)
        _put16(p + 26, xlen)
        if blen:
            memcpy(p + RECORD_HEAD, pre, plen)
            memcpy(p + RECORD_HEAD + plen, bm, blen - plen)
        memcpy(p + RECORD_HEAD + blen, x, xlen)
        memcpy(p + RECORD_HEAD + blen + xlen, PyBytes_AS_STRING(data), dlen)
        puts.append((entry[2], out))
        if seq:
            seq += 1
    return puts
