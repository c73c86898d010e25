"""Collecting problems with their location: file, line and element path.

Every element of the expanded tree carries the index of the file it was read from in a private
attribute (:data:`SOURCE_ATTR`), because ``<Include>`` moves elements from one file's tree into
another's; lxml keeps each element's ``sourceline`` when it moves.

Element paths follow the XPath convention that ``lxml``'s ``getpath`` and ``xmllint`` use: a step gets a
1-based ``[n]`` index only when its parent has more than one child element of that name, e.g.
``/AMPSConfig/SOW/Topic[2]/History/Window`` (second of several topics) but ``/AMPSConfig/SOW/Topic/Name``
(the only one). Paths describe the *expanded* tree, after ``<Include>`` splicing.
"""

from __future__ import annotations

from lxml import etree

from broker.config.model import Where
from broker.errors import ConfigIssue

#: Private attribute holding the index of the source file; removed from the expanded text.
SOURCE_ATTR = "{urn:x-broker:config-source}file"


def is_element(node: object) -> bool:
    """Whether ``node`` is an element (not a comment, processing instruction or entity)."""
    return isinstance(node, etree._Element) and isinstance(node.tag, str)


def element_path(el: etree._Element) -> str:
    """The XPath-like path of ``el`` (index only where same-named siblings repeat)."""
    steps: list[str] = []
    node: etree._Element | None = el
    while node is not None:
        parent = node.getparent()
        step = str(node.tag)
        if parent is not None:
            # lxml's sibling iteration runs in C: cheap even with thousands of siblings.
            before = sum(1 for _ in node.itersiblings(node.tag, preceding=True))
            if before or next(node.itersiblings(node.tag), None) is not None:
                step += f"[{before + 1}]"
        steps.append(step)
        node = parent
    return "/" + "/".join(reversed(steps))


class IssueLog:
    """Errors and warnings found while loading one configuration.

    Args:
        files: Display names of the files read so far; :meth:`add_file` appends more.
    """

    def __init__(self, files: list[str] | None = None) -> None:
        self.files: list[str] = list(files or [])
        self.errors: list[ConfigIssue] = []
        self.warnings: list[ConfigIssue] = []
        #: When ``ConfigValidation`` is ``disabled``, unknown elements are warnings, not errors.
        self.lenient_unknown = False

    def add_file(self, name: str) -> int:
        """Remember a file; returns the index stored in :data:`SOURCE_ATTR`."""
        self.files.append(name)
        return len(self.files) - 1

    def file_of(self, el: etree._Element) -> str:
        """The display name of the file ``el`` came from."""
        node: etree._Element | None = el
        while node is not None:
            index = node.get(SOURCE_ATTR) if is_element(node) else None
            if index is not None and index.isdigit() and int(index) < len(self.files):
                return self.files[int(index)]
            node = node.getparent()
        return self.files[0] if self.files else ""

    def where(self, el: etree._Element) -> Where:
        """File, line and path of ``el``."""
        return Where(self.file_of(el), el.sourceline or 0, element_path(el))

    def error(self, el: etree._Element | Where, message: str, *, line: int | None = None) -> None:
        """Record an error at ``el`` (an element or a :class:`Where`); ``line`` overrides its line."""
        self.errors.append(self._issue(el, message, "error", line))

    def warn(self, el: etree._Element | Where, message: str, *, line: int | None = None) -> None:
        """Record a warning at ``el``."""
        self.warnings.append(self._issue(el, message, "warning", line))

    def unknown(self, el: etree._Element, message: str) -> None:
        """Record an element AMPS does not know: an error, or a warning under ``ConfigValidation``
        ``disabled`` (AMPS then starts anyway)."""
        if self.lenient_unknown:
            self.warn(el, message + " (ignored: ConfigValidation is disabled)")
        else:
            self.error(el, message)

    def drop_warnings_under(self, path: str) -> None:
        """Forget warnings about elements inside ``path`` (when the whole element is ignored, one
        warning about it is enough)."""
        prefix = path + "/"
        self.warnings = [w for w in self.warnings if not w.path.startswith(prefix)]

    def in_order(self, issues: list[ConfigIssue]) -> list[ConfigIssue]:
        """``issues`` sorted by file (main file first, then includes as read) and line."""
        rank = {name: i for i, name in reversed(list(enumerate(self.files)))}
        return sorted(issues, key=lambda i: (rank.get(i.file, len(rank)), i.line))

    def _issue(self, el: etree._Element | Where, message: str, severity: str, line: int | None) -> ConfigIssue:
        where = el if isinstance(el, Where) else self.where(el)
        return ConfigIssue(
            file=where.file,
            line=where.line if line is None else line,
            path=where.path,
            message=message,
            severity=severity,
        )
