"""Built-in SOW key generators, each an ordinary plugin advertised by an entry point.

- ``default`` (:mod:`.default`): AMPS-style opaque key, a 64-bit checksum over the key domain and the
  ``<Key>`` field values; also :func:`~.default.validate_user_key` for publisher-supplied ``SowKey``\\s.
- ``chaining`` (:mod:`.chaining`): id chaining; messages linked by secondary identifiers share one key.
"""
