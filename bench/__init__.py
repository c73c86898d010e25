"""The benchmark harness: the broker against real peers (Redis, NATS, Mosquitto) on one machine.

Run ``python -m bench`` (or ``python bench/run.py``); ``--quick`` for small sizes. See docs/bench.md.
The ``bench_*.py`` scripts beside this package are standalone micro-benchmarks of single layers.
"""
