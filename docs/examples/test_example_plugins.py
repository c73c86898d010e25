"""The broker's conformance suites run on the example plugins, as a plugin author runs them on their own.

From the repository root (``tests/plugins/test_plugins_docs_examples.py`` runs exactly this)::

    PYTHONPATH=docs/examples pytest docs/examples/test_example_plugins.py
"""

from __future__ import annotations

from pathlib import Path

from counting_storage import CountingStorage
from custom_keygen import UpperKeyGenerator

from broker.sow.keys import KeySpec
from broker.sow.storage import StorageSpec
from broker.testing import KeyGeneratorConformance, StorageConformance


class TestCountingStorage(StorageConformance):
    durable = False         # a memory engine: nothing survives close()
    many = 10_000           # records written by the bulk test

    def make_storage(self, path: Path) -> CountingStorage:
        return CountingStorage(StorageSpec(topic="t", path=str(path), options={"ReportEvery": "1000"}))


class TestUpperKeys(KeyGeneratorConformance):
    key_fields = ("/id", "/region")
    options = {"Separator": ";"}
    # required_fields = ("/id",)   # when some key fields are optional

    def make_key_generator(self, spec: KeySpec) -> UpperKeyGenerator:
        return UpperKeyGenerator(spec)
