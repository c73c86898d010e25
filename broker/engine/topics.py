"""Topic patterns: literal topics and AMPS regex topics.

AMPS treats a subscription topic that contains regular-expression metacharacters as a regex, matched
unanchored against the topic of each message (``^`` and ``$`` anchor explicitly). Topic regexes run on
RE2 (the engine LIKE uses, :func:`broker.expr._regex.compile_like`): time linear in the topic whatever
the pattern, so a subscription such as ``(a+)+$`` cannot stall the event loop while messages are routed;
PCRE constructs RE2 lacks (look-around, back-references) are refused with ``bad regex topic``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.errors import CommandError
from broker.expr._regex import LikeRegexError, Regex, compile_like

_REGEX_CHARS = frozenset(".*+?[](){}^$|\\")


def is_regex_topic(topic: str) -> bool:
    """Whether ``topic`` is a regular expression rather than a literal topic name."""
    return any(ch in _REGEX_CHARS for ch in topic)


@dataclass(frozen=True)
class TopicPattern:
    """A subscription's topic: literal, or a compiled regex."""

    text: str
    regex: Regex | None

    @classmethod
    def compile(cls, text: str) -> TopicPattern:
        """Compile ``text``.

        Raises:
            CommandError: ``invalid topic`` for an empty topic, ``bad regex topic`` for a bad regex.
        """
        if not text:
            raise CommandError("invalid topic", "a topic is required")
        if not is_regex_topic(text):
            return cls(text, None)
        try:
            return cls(text, compile_like(text, kind="a regex topic"))
        except LikeRegexError as exc:
            raise CommandError("bad regex topic", f"bad regex topic {text!r}: {exc}") from None

    def matches(self, topic: str) -> bool:
        """Whether a message published to ``topic`` is in scope."""
        if self.regex is None:
            return topic == self.text
        return self.regex.search(topic)


@dataclass(frozen=True)
class GuardedTopicPattern(TopicPattern):
    """A regex subscription topic that also needs ``guard(topic)``: the topics an identity's entitlements let
    it read (the router asks once per distinct topic and subscription, and caches the answer)."""

    guard: Callable[[str], bool]

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` matches the regex and passes the guard."""
        return super().matches(topic) and self.guard(topic)
