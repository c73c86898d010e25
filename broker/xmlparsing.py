"""The one definition of a hardened lxml parser, for configs and for the xml message type alike.

No entity resolution, no network access, no DTD loading or validation, no huge trees: what a config file
or a published message can make the parser do is limited here, once.
"""

from __future__ import annotations

from typing import Any

from lxml import etree

_HARDENED: dict[str, Any] = {
    "resolve_entities": False,
    "no_network": True,
    "load_dtd": False,
    "dtd_validation": False,
    "huge_tree": False,
}


def hardened_parser(**options: Any) -> etree.XMLParser:
    """An ``etree.XMLParser`` with the hardening flags fixed and ``options`` (comments, blank text...) added.

    Raises:
        TypeError: an option would switch a hardening flag off.
    """
    clash = set(options) & set(_HARDENED)
    if clash:
        raise TypeError(f"hardened_parser() does not let callers set {sorted(clash)}")
    return etree.XMLParser(**_HARDENED, **options)
