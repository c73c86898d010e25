"""The loaded configuration: frozen, typed dataclasses, one per AMPS element that the broker uses.

Units are already applied: intervals are float seconds, sizes are int bytes. ``line`` fields remember
where an element was defined so later errors (an unknown KeyGenerator, a port in use) can name it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from broker.errors import ConfigIssue
from broker.expr import MAX_FILTER_DEPTH, MAX_FILTER_LENGTH

_EMPTY: Mapping[str, str] = MappingProxyType({})

#: The maximum AMPS frame the broker accepts unless a Transport sets <MaxMessageSize>.
DEFAULT_MAX_MESSAGE_SIZE = 64 * 1024 * 1024
#: The largest frame a connection may send before it logged on unless a Transport sets <MaxLogonSize>.
DEFAULT_MAX_LOGON_SIZE = 64 * 1024
#: Outbound bytes buffered for one client before it is disconnected as a slow client.
DEFAULT_CLIENT_BUFFER = 256 * 1024 * 1024
#: Seconds a connection may stay without logging on unless a Transport sets <LogonTimeout>.
DEFAULT_LOGON_TIMEOUT = 10.0
#: How far a known publisher's ``s`` may jump ahead unless <PublisherSequenceJumpLimit> says otherwise.
DEFAULT_SEQUENCE_JUMP_LIMIT = 1_000_000
#: Bytes of client input and output buffers, all connections together, unless <TotalMessageMemoryLimit> is set.
DEFAULT_TOTAL_MEMORY_LIMIT = 1024 * 1024 * 1024
#: Seconds a shutdown drains clients unless <ShutdownTimeout> says otherwise.
DEFAULT_SHUTDOWN_TIMEOUT = 10.0


@dataclass(frozen=True)
class Where:
    """Where an element was defined: file, line and element path."""

    file: str = ""
    line: int = 0
    path: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.path}" if self.line else f"{self.file}: {self.path}"


@dataclass(frozen=True)
class AdminConfig:
    """``<Admin>``: the HTTP admin server (metrics, /amps statistics tree)."""

    host: str = "127.0.0.1"
    port: int = 8085
    interval: float = 10.0
    where: Where = field(default_factory=Where)
    #: ``<Authentication>`` of the Admin server; ``None``: the instance's.
    authentication: PluginRef | None = None
    #: ``<AnonymousPaths>``: a regex of paths served without authentication (never the administrator ones).
    anonymous_paths: str | None = None
    #: The realm of the ``WWW-Authenticate: Basic`` challenge (``<WWWAuthenticate>``).
    realm: str = "broker"
    #: HTTPS: ``<Certificate>`` and ``<PrivateKey>`` (both or neither), ``<Ciphers>``.
    certificate: str | None = None
    private_key: str | None = None
    ciphers: str | None = None


@dataclass(frozen=True)
class TlsConfig:
    """The TLS settings of a ``tcps`` transport (reused by any transport type that speaks TLS)."""

    certificate: str
    private_key: str
    ca_file: str | None = None
    ca_path: str | None = None
    #: ``<VerifyClient>``: require a client certificate chaining to ``ca_file``/``ca_path``.
    verify_client: bool = False
    ciphers: str | None = None


@dataclass(frozen=True)
class TransportConfig:
    """``<Transports><Transport>``: one listener."""

    name: str
    type: str = "tcp"
    host: str = "0.0.0.0"
    port: int = 9007
    protocol: str = "amps"
    #: ``None``: the client's URI (``/amps/json``) chooses the message type.
    message_type: str | None = None
    #: Largest frame accepted (``<MaxMessageSize>``, a broker extension); bigger frames close the connection.
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    #: Largest frame accepted before the connection logged on (``<MaxLogonSize>``, a broker extension; the
    #: smaller of it and ``max_message_size`` applies): a bigger one closes the connection.
    max_logon_size: int = DEFAULT_MAX_LOGON_SIZE
    #: ``<MessageMemoryLimit>`` per client: outbound bytes buffered before the client is disconnected.
    client_buffer: int = DEFAULT_CLIENT_BUFFER
    #: ``<LogonTimeout>`` (broker extension): seconds a connection may stay without logging on (0: forever).
    logon_timeout: float = DEFAULT_LOGON_TIMEOUT
    #: ``<IdleTimeout>`` (broker extension): seconds without any byte from the client before it is closed (0: never).
    idle_timeout: float = 0.0
    #: ``<MaxMessageDepth>`` (broker extension): deepest json/xml nesting a published body may have
    #: (``broker.messagetypes.DEFAULT_MAX_DEPTH``, at most ``MAX_DEPTH_LIMIT``).
    max_message_depth: int = 64
    where: Where = field(default_factory=Where)
    #: ``<Authentication>`` / ``<Entitlement>`` of this transport; ``None``: the instance's.
    authentication: PluginRef | None = None
    entitlement: PluginRef | None = None
    #: TLS (``tcps``); ``None``: plain TCP.
    tls: TlsConfig | None = None


@dataclass(frozen=True)
class ModuleConfig:
    """``<Modules><Module>``: a plugin module loaded by dotted path or ``.py`` file."""

    name: str
    library: str
    # default_factory: a mappingproxy is unhashable on Python 3.11, so dataclasses rejects it as a default.
    options: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    where: Where = field(default_factory=Where)


@dataclass(frozen=True)
class PluginRef:
    """A ``<Module>`` + ``<Options>`` pair naming a registered plugin (KeyGenerator, action steps)."""

    module: str
    # default_factory: a mappingproxy is unhashable on Python 3.11, so dataclasses rejects it as a default.
    options: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    where: Where = field(default_factory=Where)


@dataclass(frozen=True)
class HistoryConfig:
    """``<History>`` of a SOW topic (historical SOW queries)."""

    window: float
    granularity: float = 0.0


#: ``<RecordCacheMemoryLimit>`` of a SOW topic when absent (bytes).
DEFAULT_RECORD_CACHE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class SowTopicConfig:
    """``<SOW><Topic>`` (or legacy ``<TopicDefinition>``)."""

    name: str
    message_type: str
    keys: tuple[str, ...] = ()
    key_domain: str | None = None
    key_generator: PluginRef | None = None
    #: ``<Storage>`` (a broker extension): the storage engine and its options; ``None``: the default rule
    #: (``leveldb`` at ``FileName``, ``memory`` when transient), see :attr:`storage_engine`.
    storage: PluginRef | None = None
    #: ``FileName`` with ``%n`` replaced by the topic name; ``None`` when unset.
    file_name: str | None = None
    durability: str = "persistent"  # or "transient"
    #: ``None`` when Expiration is disabled/absent; ``0.0`` when ``enabled`` without a default;
    #: otherwise the default lifetime in seconds.
    expiration: float | None = None
    history: HistoryConfig | None = None
    #: ``<RecordCacheMemoryLimit>`` (a broker extension): bytes of the topic's record cache (0: none).
    record_cache_bytes: int = DEFAULT_RECORD_CACHE_BYTES
    where: Where = field(default_factory=Where)

    @property
    def storage_engine(self) -> str:
        """The storage engine's registered name: ``<Storage><Module>``, else ``memory`` for a transient topic
        (or one without ``FileName``) and ``leveldb`` otherwise."""
        if self.storage is not None:
            return self.storage.module
        return "memory" if self.durability == "transient" or not self.file_name else "leveldb"

    @property
    def expiration_enabled(self) -> bool:
        """Whether messages on this topic may expire."""
        return self.expiration is not None


@dataclass(frozen=True)
class LoggedTopic:
    """``<TransactionLog><Topic>``: topics recorded, by literal name or regex, with a message type."""

    name: str
    message_type: str


@dataclass(frozen=True)
class TransactionLogConfig:
    """``<TransactionLog>``."""

    journal_directory: str
    journal_archive_directory: str | None = None
    preallocated_journal_files: int = 2
    journal_size: int = 1024 * 1024 * 1024
    min_journal_size: int = 10 * 1024 * 1024
    flush_interval: float = 0.1
    topics: tuple[LoggedTopic, ...] = ()
    where: Where = field(default_factory=Where)
    #: ``<DamagedRecords>`` (broker extension): ``stop`` or ``skip`` damaged journal records.
    damaged_records: str = "stop"
    #: ``<InactiveClientAckExpiration>``: seconds after which an inactive publisher's de-duplication entries
    #: expire (0: never).
    inactive_client_ack_expiration: float = 0.0
    #: ``<PublisherSequenceJumpLimit>`` (broker extension): largest jump of a known publisher's ``s`` (0: none).
    sequence_jump_limit: int = DEFAULT_SEQUENCE_JUMP_LIMIT


@dataclass(frozen=True)
class ActionConfig:
    """``<Actions><Action>``: On trigger, optional If gates, Do steps."""

    on: tuple[PluginRef, ...]
    if_: tuple[PluginRef, ...] = ()
    do: tuple[PluginRef, ...] = ()
    where: Where = field(default_factory=Where)
    #: ``If`` and ``Do`` in file order as ``("if" | "do", ref)``: each ``If`` gates the steps after it.
    steps: tuple[tuple[str, PluginRef], ...] = ()


@dataclass(frozen=True)
class LogTargetConfig:
    """``<Logging><Target>``: one destination of the broker's log (see :mod:`broker.logfiles`)."""

    #: ``file``, ``stdout`` or ``stderr``.
    protocol: str
    #: The file name mask (strftime tokens and ``%n``) of a ``file`` target.
    file_name: str | None = None
    #: The AMPS level name (``info``, ``warning``...): the lowest level written; ``None``: the CLI's level.
    level: str | None = None
    #: AMPS level names written in addition to ``level`` and above (``<Levels>``).
    levels: tuple[str, ...] = ()
    where: Where = field(default_factory=Where)


@dataclass(frozen=True)
class LoggingConfig:
    """``<Logging>``: where the broker logs; no target keeps the default (stderr)."""

    targets: tuple[LogTargetConfig, ...] = ()
    where: Where = field(default_factory=Where)


@dataclass(frozen=True)
class Config:
    """A whole, validated configuration."""

    name: str
    source: str = ""
    admin: AdminConfig | None = None
    transports: tuple[TransportConfig, ...] = ()
    modules: tuple[ModuleConfig, ...] = ()
    sow_topics: tuple[SowTopicConfig, ...] = ()
    transaction_log: TransactionLogConfig | None = None
    actions: tuple[ActionConfig, ...] = ()
    #: ``<Logging>``; ``None`` when absent (the broker logs to stderr at the ``--log-level``).
    logging: LoggingConfig | None = None
    #: ``<TotalMessageMemoryLimit>`` (broker extension): client buffers of all connections together (0: none).
    total_memory_limit: int = DEFAULT_TOTAL_MEMORY_LIMIT
    #: The instance's ``<Authentication>`` / ``<Entitlement>``; ``None``: AMPS's allow-all defaults.
    authentication: PluginRef | None = None
    entitlement: PluginRef | None = None
    #: ``<AllowClientNameTakeover>`` (broker extension): with authentication, whether a logon under a client
    #: name another user holds disconnects that user (AMPS's behaviour) instead of being refused.
    allow_client_name_takeover: bool = False
    #: ``<ShutdownTimeout>`` (broker extension): seconds a shutdown lets clients finish their commands and get
    #: their persisted acks before the rest is cancelled.
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    #: ``<MaxFilterLength>`` (broker extension): the longest content filter accepted, in characters.
    max_filter_length: int = MAX_FILTER_LENGTH
    #: ``<MaxFilterDepth>`` (broker extension): the deepest nesting of a content filter accepted.
    max_filter_depth: int = MAX_FILTER_DEPTH
    #: Elements AMPS defines that the broker does not support yet, and other non-fatal notes.
    warnings: tuple[ConfigIssue, ...] = ()
    #: The fully expanded XML text (``${VAR}`` and ``<Include>`` resolved), as ``--dump-config`` prints.
    expanded_xml: str = ""
