"""``${NAME}`` expansion in configuration text, as AMPS does at load time.

Variables come from the environment (or the ``env`` mapping given to ``load_config``) plus two built-ins
that always describe the main configuration file: ``AMPS_CONFIG_DIRECTORY`` (its directory, absolute)
and ``AMPS_CONFIG_PATH`` (its absolute path). The built-ins win over environment variables of the same
name, so they cannot point at the wrong file.

Expansion happens after parsing, in element text, attribute values and the text between elements, so
a value is always literal text: a ``<`` or ``&`` in a variable cannot change the XML structure. An
undefined variable is an error (AMPS does not document what it does; substituting an empty string
silently would turn ``${DATA}/journal`` into ``/journal``). ``$`` not followed by ``{`` is kept as is.
Action variables written ``{{NAME}}`` are not touched: actions substitute them when they run.
"""

from __future__ import annotations

import difflib
import os.path
import re
from collections.abc import Mapping

from lxml import etree

from broker.config.issues import SOURCE_ATTR, IssueLog, is_element

_REF_RE = re.compile(r"\$\{([^}]*)\}?")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def builtin_variables(config_path: str) -> dict[str, str]:
    """The variables AMPS defines for a configuration file at ``config_path`` (absolute)."""
    return {
        "AMPS_CONFIG_DIRECTORY": os.path.dirname(config_path),
        "AMPS_CONFIG_PATH": config_path,
    }


def expand(text: str, variables: Mapping[str, str]) -> tuple[str, list[tuple[int, str]]]:
    """Replace every ``${NAME}`` in ``text``.

    Args:
        text: Text that may hold references.
        variables: Defined variables.

    Returns:
        The expanded text and a list of ``(offset, message)`` problems (offset into ``text``); a
        reference that cannot be expanded is left as written.
    """
    if "${" not in text:
        return text, []
    problems: list[tuple[int, str]] = []

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if not match.group(0).endswith("}"):
            problems.append((match.start(), f"'${{' without a closing '}}' in {_excerpt(text, match.start())}"))
            return match.group(0)
        if not _NAME_RE.fullmatch(name):
            problems.append((match.start(), f"{match.group(0)!r} is not a variable reference "
                             "(write ${NAME} with a name of letters, digits and _)"))
            return match.group(0)
        if name not in variables:
            close = difflib.get_close_matches(name, list(variables), n=1)
            hint = f" Did you mean ${{{close[0]}}}?" if close else ""
            problems.append((match.start(), f"undefined variable ${{{name}}}: set environment variable "
                             f"{name} before starting the broker.{hint}"))
            return match.group(0)
        return variables[name]

    return _REF_RE.sub(substitute, text), problems


def _excerpt(text: str, offset: int) -> str:
    return repr(text[offset : offset + 40])


def expand_tree(root: etree._Element, variables: Mapping[str, str], log: IssueLog) -> None:
    """Expand references in place in every element's text, tail and attribute values under ``root``."""
    for node in root.iter():
        line = node.sourceline or 0
        if is_element(node):
            if node.text:
                node.text = _expand_at(node, node.text, line, variables, log)
            for key, value in node.attrib.items():
                if key != SOURCE_ATTR and "${" in value:
                    node.set(key, _expand_at(node, value, line, variables, log))
        if node.tail and node is not root:
            parent = node.getparent()
            if parent is not None:
                node.tail = _expand_at(parent, node.tail, line, variables, log)


def _expand_at(el: etree._Element, text: str, line: int, variables: Mapping[str, str],
               log: IssueLog) -> str:
    expanded, problems = expand(text, variables)
    for offset, message in problems:
        log.error(el, message, line=line + text.count("\n", 0, offset) if line else 0)
    return expanded
