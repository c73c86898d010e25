"""Build the optional compiled twins of the hot path (``broker/speedups/*.pyx``).

Everything else is declared in pyproject.toml. Each ``.pyx`` is compiled with Cython into an optional
extension: where there is no C compiler, or the build fails, pip still installs the package and the
broker runs the pure-Python code the module is the twin of (:mod:`broker.speedups` says which is in use).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import Extension, setup

_HERE = Path(__file__).parent
_SOURCES = sorted(p.relative_to(_HERE).as_posix() for p in (_HERE / "broker" / "speedups").glob("*.pyx"))


def _extensions() -> list[Extension]:
    if not _SOURCES:
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:  # no Cython in the build environment: the pure-Python fallback only
        return []
    modules = [
        Extension(src[: -len(".pyx")].replace("/", "."), [src], optional=True, extra_compile_args=["-O2"],
                  include_dirs=["broker/speedups"])
        for src in _SOURCES
    ]
    return cythonize(modules, language_level=3, compiler_directives={"boundscheck": False, "wraparound": False})


setup(ext_modules=_extensions())
