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
#: Private attribute of an element whose text came from an included file: ``"<file index>:<line>"``,
#: so a check can report that file without quoting its contents. Removed from the expanded text.
TEXT_SOURCE_ATTR = "{urn:x-broker:config-source}text"


def is_element(node: object) -> bool:
    """Whether ``node`` is an element (not a comment, processing instruction or entity)."""
    return isinstance(node, etree._Element) and isinstance(node.tag, str)


def element_path(el: etree._Element, steps_of: StepCache | None = None) -> str:
    """The XPath-like path of ``el`` (index only where same-named siblings repeat).

    Args:
        el: The element.
        steps_of: A cache of each element's step for a tree that no longer changes; without it each
            step counts the element's same-named siblings, which costs the number of siblings per
            call (quadratic when every one of 40,000 topics asks for its path).
    """
    steps: list[str] = []
    node: etree._Element | None = el
    while node is not None:
        parent = node.getparent()
        if parent is None:
            steps.append(str(node.tag))
        elif steps_of is not None:
            steps.append(steps_of.step(parent, node))
        else:
            steps.append(_step(node))
        node = parent
    return "/" + "/".join(reversed(steps))


def _step(node: etree._Element) -> str:
    """The path step of ``node`` found by counting its same-named siblings."""
    step = str(node.tag)
    before = sum(1 for _ in node.itersiblings(node.tag, preceding=True))
    if before or next(node.itersiblings(node.tag), None) is not None:
        step += f"[{before + 1}]"
    return step


class StepCache:
    """The path step of every child of a parent, computed in one pass over the parent's children the
    first time one of them is asked for, so a path costs its depth whatever the number of siblings.

    Only valid while the tree does not change: the loader turns it on after ``<Include>`` splicing.
    The cache holds the element proxies, which keeps their identity (lxml recreates a proxy that
    nothing references).
    """

    def __init__(self) -> None:
        self._steps: dict[etree._Element, str] = {}
        self._done: set[etree._Element] = set()

    def step(self, parent: etree._Element, node: etree._Element) -> str:
        """The step of ``node``, a child of ``parent``."""
        found = self._steps.get(node)
        if found is not None:
            return found
        if parent not in self._done:
            self._done.add(parent)
            kids = [c for c in parent if is_element(c)]
            counts: dict[str, int] = {}
            for kid in kids:
                counts[kid.tag] = counts.get(kid.tag, 0) + 1
            seen: dict[str, int] = {}
            for kid in kids:
                tag = str(kid.tag)
                seen[tag] = seen.get(tag, 0) + 1
                self._steps[kid] = f"{tag}[{seen[tag]}]" if counts[tag] > 1 else tag
            found = self._steps.get(node)
        return found if found is not None else _step(node)


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
        self._steps: StepCache | None = None

    def tree_complete(self) -> None:
        """The expanded tree no longer changes: element paths may be cached from now on."""
        self._steps = StepCache()

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

    def included_text_at(self, el: etree._Element) -> Where | None:
        """Where the text of ``el`` came from when an ``<Include>`` put it there, else ``None``."""
        index, _, line = (el.get(TEXT_SOURCE_ATTR) or "").partition(":")
        if not index.isdigit() or int(index) >= len(self.files):
            return None
        return Where(self.files[int(index)], int(line) if line.isdigit() else 0, element_path(el, self._steps))

    def where(self, el: etree._Element) -> Where:
        """File, line and path of ``el``."""
        return Where(self.file_of(el), el.sourceline or 0, element_path(el, self._steps))

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
