"""Conformance suites for plugin authors: run the broker's contracts against your own implementations.

Each suite is a pytest base class with test methods; subclass it in a ``Test*`` class and implement its
factory method (trio.testing's stream conformance tests are the model):

- :class:`StorageConformance` (``make_storage(path)``) for storage engines;
- :class:`KeyGeneratorConformance` (``make_key_generator(spec)``) for key generators, with
  :class:`DictMessage` as a stand-in parsed message;
- :class:`StepConformance`, :class:`GateConformance`, :class:`TriggerConformance` (class attributes
  ``plugin``, ``name``, ``options``) for action modules, with :class:`FakeHost`, :func:`run_step` and
  :func:`check_gate` to run one as the broker does (:mod:`broker.testing.actions`).

The broker's built-in plugins run the same suites (``tests/storage``, ``tests/keygen``). Importing this
package imports pytest.
"""

from __future__ import annotations

from broker.testing.actions import (
    FakeHost,
    GateConformance,
    StepConformance,
    TriggerConformance,
    check_gate,
    load_action,
    run_step,
)
from broker.testing.keygen import DictMessage, KeyGeneratorConformance
from broker.testing.storage import StorageConformance

__all__ = [
    "DictMessage",
    "FakeHost",
    "GateConformance",
    "KeyGeneratorConformance",
    "StepConformance",
    "StorageConformance",
    "TriggerConformance",
    "check_gate",
    "load_action",
    "run_step",
]
