"""The single exception hierarchy of the broker.

Every error the broker raises on purpose derives from :class:`BrokerError`. Messages say what is wrong
and what to do about it; the CLI prints them without a traceback.

Errors that travel back to an AMPS client carry ``reason``: the exact lower-case AMPS reason string the
official clients map to an exception class (see ``docs/protocol.md``).
"""

from __future__ import annotations

from dataclasses import dataclass


class BrokerError(Exception):
    """Root of every error the broker raises deliberately."""

    #: The AMPS ``reason`` string sent to a client when this error answers a command.
    reason: str = "command failed"


@dataclass(frozen=True)
class ConfigIssue:
    """One problem found in a configuration file.

    Attributes:
        file: The file the problem is in.
        line: The line of the element (0 when unknown).
        path: The element path, e.g. ``/AMPSConfig/SOW/Topic[2]/History/Window``.
        message: What is wrong and what to do.
        severity: ``"error"`` or ``"warning"``.
    """

    file: str
    line: int
    path: str
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        prefix = "" if self.severity == "error" else "warning: "
        text = f"{prefix}{self.path}: {self.message}" if self.path else f"{prefix}{self.message}"
        return f"{where}: {text}" if where else text


class ConfigError(BrokerError):
    """The configuration cannot be used. Holds every error found, not just the first.

    Args:
        issues: The problems found (errors; warnings may be included for context).
    """

    reason = "invalid configuration"

    def __init__(self, issues: list[ConfigIssue] | str) -> None:
        if isinstance(issues, str):
            issues = [ConfigIssue(file="", line=0, path="", message=issues)]
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class PluginError(BrokerError):
    """A plugin could not be loaded, is misspelled, or names clash."""


class ProtocolError(BrokerError):
    """The AMPS byte stream is broken (framing, header syntax, size)."""


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol cannot express (a bug on our side)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that are not a valid AMPS frame; the connection must be closed."""


class NotAmpsError(RemoteProtocolError):
    """The peer spoke another protocol (an HTTP or WebSocket request) on an AMPS TCP port."""


class CommandError(BrokerError):
    """A single command failed; the connection carries on. ``reason`` goes back in the ack.

    Args:
        reason: The exact AMPS reason string (e.g. ``"invalid topic"``).
        detail: A longer explanation for logs.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail or reason
        super().__init__(self.detail)


class FilterError(CommandError):
    """A content filter or OrderBy clause does not parse or cannot be evaluated.

    Args:
        message: What is wrong.
        text: The filter text.
        column: 1-based column of the problem (0 when unknown).
    """

    def __init__(self, message: str, text: str = "", column: int = 0) -> None:
        self.text = text
        self.column = column
        where = f" at column {column}" if column else ""
        super().__init__("bad filter", f"{message}{where} in filter {text!r}" if text else message)


class ParameterError(BrokerError):
    """A request parameter's value cannot be used (an Admin action's query parameter that does not parse as
    what the option it fills expects). Answered with HTTP 400; nothing runs.

    Args:
        parameter: The parameter's name, as sent.
        message: What is wrong, what is expected, and that nothing ran.
    """

    reason = "bad parameter"

    def __init__(self, parameter: str, message: str) -> None:
        self.parameter = parameter
        super().__init__(message)


class StorageError(BrokerError):
    """A storage engine failed to read or write."""

    reason = "sow store failed"


class KeyGenerationError(CommandError):
    """A SOW key could not be generated for a message (missing key field, bad user key)."""

    def __init__(self, detail: str, reason: str = "bad sow key") -> None:
        super().__init__(reason, detail)


class JournalError(BrokerError):
    """The transaction log could not be written or read."""

    reason = "tx store failure"
