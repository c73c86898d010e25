"""The plain HTML rendering of ``/amps`` (AMPS's "basic monitoring interface"): browse the tree by links.

Each page shows one node: scalars as ``name: value`` rows, sub-objects and collection elements as links
one level down, plus a link to the same node as JSON.
"""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import quote

__all__ = ["render_node"]


def _link(path: str, text: str) -> str:
    return f'<a href="{escape(quote(path), quote=True)}">{escape(text)}</a>'


def render_node(node: Any, path: str) -> str:
    """One page of the browsable tree.

    Args:
        node: The node (rendered tree: dicts, lists of objects with ``id``, string leaves).
        path: The node's URL path without suffix, e.g. ``/amps/instance``.

    Returns:
        A complete HTML document.
    """
    rows: list[str] = []
    base = path.rstrip("/")
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, dict | list):
                rows.append(f"<li>{_link(f'{base}/{key}', key)}</li>")
            else:
                rows.append(f"<li>{escape(key)}: <code>{escape(str(value))}</code></li>")
    elif isinstance(node, list):
        for element in node:
            element_id = str(element.get("id", "")) if isinstance(element, dict) else str(element)
            rows.append(f"<li>{_link(f'{base}/{element_id}', element_id)}</li>")
    else:
        rows.append(f"<li><code>{escape(str(node))}</code></li>")
    parent = base.rsplit("/", 1)[0]
    up = f"<p>{_link(parent, '..')}</p>" if parent.startswith("/amps") else ""
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{escape(base)}</title></head><body>\n<h1>{escape(base)}</h1>\n{up}"
        f"<p>{_link(base + '.json', 'as JSON')}</p>\n<ul>\n" + "\n".join(rows) + "\n</ul>\n</body></html>\n"
    )
