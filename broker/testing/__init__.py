"""Conformance suites for plugin authors: run the broker's contracts against your own implementations.

Each suite is a pytest base class with test methods; subclass it in a ``Test*`` class and implement its
factory method (trio.testing's stream conformance tests are the model):

- :class:`StorageConformance` (``make_storage(path)``) for storage engines;
- :class:`KeyGeneratorConformance` (``make_key_generator(spec)``) for key generators, with
  :class:`DictMessage` as a stand-in parsed message.

The broker's built-in plugins run the same suites (``tests/storage``, ``tests/keygen``). Importing this
package imports pytest.
"""

from __future__ import annotations

from broker.testing.keygen import DictMessage, KeyGeneratorConformance
from broker.testing.storage import StorageConformance

__all__ = ["DictMessage", "KeyGeneratorConformance", "StorageConformance"]
