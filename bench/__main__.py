"""``python -m bench``: run the benchmark harness (see :mod:`bench.run`)."""

from bench.run import main

if __name__ == "__main__":  # spawned subscriber processes import this module too
    raise SystemExit(main())
