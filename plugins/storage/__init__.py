"""Built-in SOW storage engines, each an ordinary plugin advertised by an entry point.

- ``memory`` (:mod:`.memory`): a dict plus a sorted key list, copy-on-write snapshots; nothing persists.
- ``leveldb`` (:mod:`.leveldb`): one LevelDB (plyvel) database per topic at its ``FileName``.
"""
