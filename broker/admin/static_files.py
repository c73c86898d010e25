"""The web console's files: plain static files in the package (``broker/admin/static``) and the AMPS
JavaScript client installed from npm (:mod:`broker.admin.jsclient`), read once and kept in memory."""

from __future__ import annotations

import functools
from pathlib import Path

from broker.admin import jsclient

STATIC = Path(__file__).parent / "static"

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml",
          "": "text/plain; charset=utf-8"}
#: The console's own files, and the two files of the npm client it serves.
_OWN = frozenset({"index.html", "console.js", "console.css"})
_VENDOR = {"vendor/amps.js": "amps.js", "vendor/LICENSE": "LICENSE"}


@functools.lru_cache(maxsize=16)
def _read(path: Path) -> bytes:
    return path.read_bytes()


def console_file(name: str) -> tuple[bytes, str] | None:
    """``(body, content type)`` of the console file ``name`` (``index.html``, ``vendor/amps.js``...), or
    ``None``: not a console file, or the JavaScript client is not installed."""
    if name in _OWN:
        path = STATIC / name
    elif name in _VENDOR:
        where = jsclient.find()
        if where is None:
            if name == "vendor/amps.js":  # the console explains how to install it
                return b"window.ampsMissing = true;\n", _TYPES[".js"]
            return None
        path = where / _VENDOR[name]
    else:
        return None
    try:
        return _read(path), _TYPES.get(path.suffix, _TYPES[""])
    except OSError:
        return None
