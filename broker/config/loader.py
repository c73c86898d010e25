"""Loading a configuration: read, parse (hardened), expand ``${VAR}``, splice ``<Include>``, validate.

``load_config`` is the only entry point. It raises :class:`~broker.errors.ConfigError` holding every
error found (followed by the warnings), and nothing else, whatever the input.

Includes (AMPS 5.2+): ``<Include>file</Include>`` may sit inside any element. The path is relative to
the directory of the file that holds the ``<Include>`` (or absolute; ``${AMPS_CONFIG_DIRECTORY}`` helps).
The file is a bare fragment: one or more elements, no declaration needed, and its content replaces the
``<Include>``. When the fragment is a single element with the same name as the element holding the
``<Include>`` (``<Transports>`` included inside ``<Transports>``, or a whole ``<AMPSConfig>``), that
element's content is spliced instead, so an included file may also be a well-formed document. Every file
is expanded (``${VAR}``) before its own includes are processed. A cycle is an error naming it; the total
size of everything read is capped by ``ConfigCycleDetectionThreshold`` (default 5MB).
"""

from __future__ import annotations

import copy
import os
import stat
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace

from lxml import etree

from broker.config.files import check_files
from broker.config.issues import SOURCE_ATTR, TEXT_SOURCE_ATTR, IssueLog, is_element
from broker.config.model import Config, Where
from broker.config.schema import check_tree
from broker.config.units import parse_size
from broker.config.validate import build_config
from broker.config.values import parse_bool
from broker.config.variables import builtin_variables, expand_tree
from broker.config.xmlparse import parse_document, parse_fragment
from broker.errors import ConfigError, ConfigIssue

#: ``ConfigCycleDetectionThreshold`` when the config does not set it (AMPS's default).
DEFAULT_SIZE_THRESHOLD = 5 * 1024 * 1024
#: A file larger than this is not read at all, whatever the threshold says.
MAX_FILE_SIZE = 256 * 1024 * 1024
#: Include elements processed at most (a guard on top of the size threshold).
MAX_INCLUDES = 1000


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None, *,
                check_files: bool = False) -> Config:
    """Load, expand and validate an AMPS-style XML configuration file.

    Args:
        path: The main configuration file.
        env: Variables for ``${NAME}`` expansion; defaults to ``os.environ``. ``AMPS_CONFIG_DIRECTORY``
            and ``AMPS_CONFIG_PATH`` are always defined from ``path``.
        check_files: Also check, from the working directory, every file the configuration reads (TLS
            certificates, keys and CA files, password and entitlement files) and every folder it writes
            into (:mod:`broker.config.files`): what ``broker check`` does.

    Returns:
        The validated configuration; ``Config.warnings`` lists accepted-but-ignored elements.

    Raises:
        ConfigError: the file cannot be used. ``issues`` holds every error (each with file, line and
            element path), then the warnings.
    """
    try:
        shown = os.fsdecode(path)
    except TypeError:
        raise ConfigError([ConfigIssue(repr(path), 0, "", "not a file path: pass a str or pathlib.Path")]) from None
    try:
        return _Loader(shown, os.environ if env is None else env, check_files=check_files).load()
    except ConfigError:
        raise
    except Exception as exc:  # the loader's promise: nothing but ConfigError escapes
        raise ConfigError([ConfigIssue(
            str(shown), 0, "",
            f"internal error while loading the configuration: {exc!r}. This is a broker bug; please "
            "report it with the configuration file.",
        )]) from exc


@dataclass(frozen=True)
class _FileContext:
    """The file an ``<Include>`` element was read from."""

    shown: str
    absolute: str
    chain: tuple[tuple[str, str], ...]  # (real path, shown name) of every file up to this one


class _Loader:
    def __init__(self, shown: str, env: Mapping[str, str], *, check_files: bool = False) -> None:
        self.shown = shown
        self.check_files = check_files
        self.log = IssueLog([shown])
        self.env = env
        self.bytes_read = 0
        self.threshold = DEFAULT_SIZE_THRESHOLD
        self.include_comments = False
        self.includes_done = 0
        self.over_threshold = False
        self.variables: dict[str, str] = {}

    def fail(self) -> ConfigError:
        return ConfigError(self.log.in_order(self.log.errors) + self.log.in_order(self.log.warnings))

    def load(self) -> Config:
        try:
            absolute = os.path.abspath(self.shown)
        except (OSError, ValueError) as exc:
            self.log.error(Where(self.shown), f"cannot use this path: {exc}")
            raise self.fail() from None
        data = self._read(absolute, Where(self.shown), what="configuration file")
        if data is None:
            raise self.fail()
        root = parse_document(data, 0, self.log)
        if root is None:
            raise self.fail()
        if root.tag != "AMPSConfig":
            self.log.error(self.log.where(root), f"the root element is <{root.tag}>; an AMPS configuration "
                           "starts with <AMPSConfig>")
            raise self.fail()
        self.variables = {**self.env, **builtin_variables(absolute)}
        expand_tree(root, self.variables, self.log)
        self._read_loader_settings(root)
        if self.bytes_read > self.threshold:
            self.log.error(self.log.where(root), f"the configuration is larger than {self.threshold} bytes "
                           "(ConfigCycleDetectionThreshold, default 5MB): raise ConfigCycleDetectionThreshold")
        self._splice_includes(root, _FileContext(self.shown, absolute, ((os.path.realpath(absolute),
                                                                          self.shown),)))
        self.log.tree_complete()
        check_tree(root, self.log)
        config = build_config(root, self.log)
        if self.check_files:
            check_files(root, self.log)
        if self.log.errors or config is None:
            raise self.fail()
        return replace(config, source=absolute, warnings=tuple(self.log.in_order(self.log.warnings)),
                       expanded_xml=expanded_text(root))

    # -- reading ---------------------------------------------------------------------------------------
    def _read(self, absolute: str, where: Where, *, what: str, line: int | None = None) -> bytes | None:
        hint = ("; an <Include> path is relative to the directory of the file that holds it"
                if what == "included file" else "")
        try:
            info = os.stat(absolute)
            if not stat.S_ISREG(info.st_mode):
                self.log.error(where, f"{what} {absolute!r} is not a regular file", line=line)
                return None
            if info.st_size > MAX_FILE_SIZE:
                self.log.error(where, f"{what} {absolute!r} is larger than {MAX_FILE_SIZE // 2**20}MB",
                               line=line)
                return None
            with open(absolute, "rb") as handle:
                data = handle.read(MAX_FILE_SIZE + 1)
        except FileNotFoundError:
            self.log.error(where, f"{what} {absolute!r} does not exist{hint}", line=line)
            return None
        except (OSError, ValueError) as exc:
            self.log.error(where, f"cannot read {what} {absolute!r}: {exc}", line=line)
            return None
        self.bytes_read += len(data)
        return data

    def _read_loader_settings(self, root: etree._Element) -> None:
        """Settings that shape expansion itself, read before includes (AMPS does the same).

        Bad values are reported by the validator; here they just leave the default.
        """
        for child in root:
            if not is_element(child) or not isinstance(child.text, str):
                continue
            try:
                if child.tag == "ConfigIncludeCommentDefault":
                    self.include_comments = parse_bool(child.text)
                elif child.tag == "ConfigCycleDetectionThreshold":
                    self.threshold = parse_size(child.text)
                elif child.tag == "ConfigValidation":
                    self.log.lenient_unknown = not parse_bool(child.text)
            except ValueError:
                pass

    # -- includes --------------------------------------------------------------------------------------
    def _splice_includes(self, root: etree._Element, main: _FileContext) -> None:
        pending: deque[tuple[etree._Element, _FileContext]] = deque(
            (el, main) for el in root.iter("Include"))
        while pending:
            include, context = pending.popleft()
            if self.over_threshold:
                return  # reported once; the configuration is not used
            self.includes_done += 1
            if self.includes_done > MAX_INCLUDES:
                self.log.error(self.log.where(include), f"more than {MAX_INCLUDES} <Include> elements: check "
                               "for includes that repeat")
                return
            spliced = self._include(include, context)
            for node, child_context in spliced:
                pending.extend((el, child_context) for el in node.iter("Include"))

    def _include(self, include: etree._Element, context: _FileContext
                 ) -> list[tuple[etree._Element, _FileContext]]:
        """Replace one ``<Include>`` by its file's content; returns the spliced elements."""
        where = self.log.where(include)
        parent = include.getparent()
        if parent is None:  # pragma: no cover - the root is <AMPSConfig>, never <Include>
            return []
        if any(is_element(c) for c in include):
            self.log.error(where, "<Include> holds a file name, not elements")
            _remove(include)
            return []
        target = "".join(include.itertext()).strip()
        if not target:
            self.log.error(where, "<Include> is empty: write the file to include, e.g. "
                                  "<Include>transports.xml</Include>")
            _remove(include)
            return []
        comment = self.include_comments
        if include.get("comment") is not None:
            try:
                comment = parse_bool(include.get("comment", ""))
            except ValueError as exc:
                self.log.error(where, f"comment=: {exc}")
        try:
            shown = os.path.normpath(os.path.join(os.path.dirname(context.shown), target))
            absolute = os.path.normpath(os.path.join(os.path.dirname(context.absolute), target))
            real = os.path.realpath(absolute)
        except (OSError, ValueError) as exc:
            self.log.error(where, f"cannot use include path {target!r}: {exc}")
            _remove(include)
            return []
        for seen_real, _ in context.chain:
            if seen_real == real:
                names = " -> ".join(name for _, name in context.chain) + f" -> {shown}"
                self.log.error(where, f"include cycle: {names}. Remove one of these <Include>s")
                _remove(include)
                return []
        data = self._read(absolute, where, what="included file")
        if data is None:
            _remove(include)
            return []
        if self.bytes_read > self.threshold:
            self.over_threshold = True
            self.log.error(where, f"the configuration with its includes exceeds {self.threshold} bytes "
                           "(ConfigCycleDetectionThreshold, default 5MB): check for repeated includes, "
                           "or raise ConfigCycleDetectionThreshold")
            _remove(include)
            return []
        index = self.log.add_file(shown)
        fragment = parse_fragment(data, index, self.log, where.path)
        if fragment is None:
            _remove(include)
            return []
        expand_tree(fragment, self.variables, self.log)
        content = fragment
        elements = [c for c in fragment if is_element(c)]
        loose_text = (fragment.text or "").strip() or any((c.tail or "").strip() for c in fragment)
        if len(elements) == 1 and elements[0].tag == parent.tag and not loose_text:
            content = elements[0]
        if loose_text and parent.get(TEXT_SOURCE_ATTR) is None:
            parent.set(TEXT_SOURCE_ATTR, f"{index}:{_first_text_line(fragment)}")
        nodes = _splice(include, content, comment, target)
        child = _FileContext(shown, absolute, (*context.chain, (real, shown)))
        return [(n, child) for n in nodes if is_element(n)]


def _first_text_line(fragment: etree._Element) -> int:
    """The line of the first non-blank text outside elements in an included fragment."""
    pieces = [(1, fragment.text or "")] + [(c.sourceline or 1, c.tail or "") for c in fragment]
    for line, text in pieces:
        if text.strip():
            return line + text[:len(text) - len(text.lstrip())].count("\n")
    return 1


def _remove(el: etree._Element) -> None:
    """Remove ``el`` but keep the text that follows it."""
    _splice_items(el, [])


def _splice(include: etree._Element, content: etree._Element, comment: bool, target: str
            ) -> list[etree._Element]:
    """Put ``content``'s text and children where ``include`` is; returns the inserted nodes."""
    items: list[str | etree._Element] = []
    if comment:
        items.append(etree.Comment(_comment_text(f" Start <Include>{target}</Include> ")))
    if content.text:
        items.append(content.text)
    for node in list(content):
        tail = node.tail
        node.tail = None
        items.append(node)
        if tail:
            items.append(tail)
    if comment:
        items.append(etree.Comment(_comment_text(f" End <Include>{target}</Include> ")))
    _splice_items(include, items)
    return [i for i in items if not isinstance(i, str)]


def _splice_items(old: etree._Element, items: list[str | etree._Element]) -> None:
    parent = old.getparent()
    assert parent is not None
    position = parent.index(old)
    previous = old.getprevious()
    tail = old.tail
    parent.remove(old)

    def add_text(text: str) -> None:
        if previous is None:
            parent.text = (parent.text or "") + text
        else:
            previous.tail = (previous.tail or "") + text

    for item in items:
        if isinstance(item, str):
            add_text(item)
        else:
            parent.insert(position, item)
            position += 1
            previous = item
    if tail:
        add_text(tail)


def _comment_text(text: str) -> str:
    # XML comments cannot hold "--" or end with "-".
    while "--" in text:
        text = text.replace("--", "- -")
    return text if not text.endswith("-") else text + " "


def expanded_text(root: etree._Element) -> str:
    """The configuration as AMPS's ``--dump-config`` prints it: variables and includes resolved."""
    clean = copy.deepcopy(root)
    for el in clean.iter():
        if is_element(el):
            el.attrib.pop(SOURCE_ATTR, None)
            el.attrib.pop(TEXT_SOURCE_ATTR, None)
    etree.cleanup_namespaces(clean)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + etree.tostring(clean, encoding="unicode") + "\n"


