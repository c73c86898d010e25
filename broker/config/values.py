"""Scalar values other than units: booleans, counts and network addresses.

Each parser raises :class:`ValueError` with a message for the user; the validator adds file, line and
element path.
"""

from __future__ import annotations

import ipaddress
import re

_TRUE = {"true", "enabled", "yes", "1", "on"}
_FALSE = {"false", "disabled", "no", "0", "off"}

#: Host used when ``InetAddr`` is a bare port: every address, as AMPS listens on all interfaces.
ANY_HOST = "0.0.0.0"

_HOSTNAME_RE = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252})")


def parse_bool(text: str) -> bool:
    """Parse an AMPS boolean: ``true``/``false``, ``enabled``/``disabled``, ``yes``/``no``, ``1``/``0``.

    Raises:
        ValueError: anything else.
    """
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"{text.strip()!r} is not a boolean (write true or false, enabled or disabled)")


def parse_count(text: str, *, minimum: int = 0) -> int:
    """Parse a whole number of things (files, slabs) that must be at least ``minimum``.

    Raises:
        ValueError: not a plain decimal integer, or below ``minimum``.
    """
    word = text.strip()
    if not re.fullmatch(r"[0-9]{1,18}", word):
        raise ValueError(f"{word!r} is not a whole number (write e.g. {max(minimum, 2)})")
    value = int(word)
    if value < minimum:
        raise ValueError(f"{value} is too small: the minimum is {minimum}")
    return value


def parse_address(text: str) -> tuple[str, int]:
    """Parse an ``InetAddr``: ``9007``, ``host:9007``, ``127.0.0.1:9007`` or ``[::1]:9007``.

    Args:
        text: The element's text.

    Returns:
        ``(host, port)``; host is :data:`ANY_HOST` for a bare port, and an IPv6 host loses its
        brackets. Port 0 is allowed (the system picks a free port, which tests use).

    Raises:
        ValueError: the text is not one of the forms above or the port is out of range.
    """
    word = text.strip()
    hint = "write a port (9007), host:port (localhost:9007) or [IPv6]:port ([::1]:9007)"
    if not word:
        raise ValueError(f"the address is empty ({hint})")
    if word.startswith("["):
        close = word.find("]")
        if close < 0 or word[close + 1 : close + 2] != ":":
            raise ValueError(f"{word!r} is not an address ({hint})")
        host, port_text = word[1:close], word[close + 2 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in {word!r} is not an IPv6 address ({hint})") from None
    elif ":" in word:
        host, _, port_text = word.rpartition(":")
        if ":" in host:
            raise ValueError(f"{word!r}: put an IPv6 address in brackets, e.g. [::1]:9007")
        if not _HOSTNAME_RE.fullmatch(host):
            raise ValueError(f"{host!r} in {word!r} is not a host name or address ({hint})")
    else:
        host, port_text = ANY_HOST, word
    if not re.fullmatch(r"[0-9]{1,5}", port_text) or int(port_text) > 65535:
        within = f" in {word!r}" if port_text != word else ""
        raise ValueError(f"{port_text!r}{within} is not a port number 0-65535 ({hint})")
    return host, int(port_text)
