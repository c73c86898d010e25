"""Topic patterns: literal topics and AMPS regex topics.

AMPS treats a subscription topic that contains regular-expression metacharacters as a regex, matched
unanchored against the topic of each message (``^`` and ``$`` anchor explicitly).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.errors import CommandError

_REGEX_CHARS = frozenset(".*+?[](){}^$|\\")


def is_regex_topic(topic: str) -> bool:
    """Whether ``topic`` is a regular expression rather than a literal topic name."""
    return any(ch in _REGEX_CHARS for ch in topic)


@dataclass(frozen=True)
class TopicPattern:
    """A subscription's topic: literal, or a compiled regex."""

    text: str
    regex: re.Pattern[str] | None

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
            return cls(text, re.compile(text))
        except re.error as exc:
            raise CommandError("bad regex topic", f"bad regex topic {text!r}: {exc}") from None

    def matches(self, topic: str) -> bool:
        """Whether a message published to ``topic`` is in scope."""
        if self.regex is None:
            return topic == self.text
        return self.regex.search(topic) is not None
