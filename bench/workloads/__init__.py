"""The workloads, W1..W6. Each module has ``run(ctx) -> list[Row]`` and measures the broker and its peers.

See docs/bench.md for what each one measures and which peer it is compared with.
"""
