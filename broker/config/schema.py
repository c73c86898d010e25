"""The AMPS configuration elements the loader knows, and what the broker does with each.

Every element AMPS 5.3 documents (``docs/amps-config-reference.md``) is declared here with one of:

* ``SUPPORTED``: validated and used; its children are checked against this tree.
* ``FREEFORM``: used, but its children are options handed to a plugin (``<Options>``), not checked.
* ``IGNORED``: AMPS defines it, the broker does not implement it yet: one warning, subtree skipped.
* ``OBSOLETE``: a pre-5.0 element AMPS still accepts and no longer uses: one warning.

A name that is not declared where it appears is an error with a did-you-mean suggestion. Elements inside
an ignored element are not inspected: AMPS validates those, the broker never reads them.

Supported leaves carry their value type, default and a one-line description; :func:`reference_rows`
turns them into the table in ``docs/config.md`` (a test keeps the two in sync).
"""

from __future__ import annotations

import difflib
import enum
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from lxml import etree

from broker.config.issues import IssueLog, is_element


class Support(enum.Enum):
    """What the broker does with an element."""

    SUPPORTED = "supported"
    FREEFORM = "free-form"
    IGNORED = "ignored"
    OBSOLETE = "obsolete"


@dataclass(frozen=True)
class ElementSpec:
    """One element of the configuration tree.

    Attributes:
        name: The element name (case-sensitive, as in XML).
        support: What the broker does with it.
        type: Value type of a leaf (``text``, ``interval``, ``size``, ...); empty for a container.
        default: The default when absent, as written in a config (``10s``), or a phrase.
        doc: One line: what it is for.
        repeatable: May appear several times in its parent.
        required: Must appear in its parent.
        children: Known child elements of a container.
        synonym_of: For an alternative spelling, the name it stands for.
    """

    name: str
    support: Support = Support.SUPPORTED
    type: str = ""
    default: str = ""
    doc: str = ""
    repeatable: bool = False
    required: bool = False
    children: tuple[ElementSpec, ...] = ()
    synonym_of: str = ""

    @cached_property
    def _by_name(self) -> dict[str, ElementSpec]:
        return {c.name: c for c in self.children}

    def child(self, name: str) -> ElementSpec | None:
        """The spec of child ``name``, or ``None`` when it is not allowed here."""
        return self._by_name.get(name)

    @property
    def is_leaf(self) -> bool:
        """Whether the element holds text rather than child elements."""
        return bool(self.type)


def leaf(name: str, type_: str, doc: str, default: str = "", *, repeatable: bool = False,
         required: bool = False, synonym_of: str = "") -> ElementSpec:
    """A supported element holding a value."""
    return ElementSpec(name, Support.SUPPORTED, type_, default, doc, repeatable, required, (), synonym_of)


def group(name: str, doc: str, *children: ElementSpec, repeatable: bool = False,
          required: bool = False) -> ElementSpec:
    """A supported element holding other elements."""
    return ElementSpec(name, Support.SUPPORTED, "", "", doc, repeatable, required, children)


def freeform(name: str, doc: str) -> ElementSpec:
    """A supported element whose children are plugin options (not checked)."""
    return ElementSpec(name, Support.FREEFORM, "", "", doc)


def ignored(*names: str, note: str = "", repeatable: bool = True) -> tuple[ElementSpec, ...]:
    """Elements AMPS defines that the broker does not implement (``note`` says what that means)."""
    return tuple(ElementSpec(n, Support.IGNORED, doc=note, repeatable=repeatable) for n in names)


def obsolete(*names: str, note: str = "") -> tuple[ElementSpec, ...]:
    """Pre-5.0 elements AMPS accepts and no longer uses."""
    return tuple(ElementSpec(n, Support.OBSOLETE, doc=note, repeatable=True) for n in names)


# -- the tree ------------------------------------------------------------------------------------------

def _plugin_ref(name: str, doc: str, *, repeatable: bool = False, required: bool = False) -> ElementSpec:
    return group(
        name, doc,
        leaf("Module", "text", "Name of a registered plugin (or a <Modules> entry).", required=True),
        freeform("Options", "Options passed to the plugin: child tag -> text."),
        repeatable=repeatable, required=required,
    )


_SLOW_CLIENT = ignored("MessageDiskLimit", "MessageDiskPath", "ClientMessageAgeLimit", "ClientMaxCapacity",
                       note="slow clients are disconnected once MessageMemoryLimit is reached; nothing "
                            "is offlined to disk")
_SECURITY = (
    _plugin_ref("Authentication", "The authentication module (password-file, or a plugin's) with its Options; "
                "transports inherit the instance's unless they set their own (docs/security.md).",
                ),
    _plugin_ref("Entitlement", "The entitlement module (entitlement-file, or a plugin's) with its Options; "
                "transports inherit the instance's unless they set their own (docs/security.md)."),
)
_TLS = (
    leaf("Certificate", "path", "tcps: the server's certificate chain (PEM). Required for tcps."),
    leaf("PrivateKey", "path", "tcps: the certificate's private key (PEM). Required for tcps."),
    leaf("CAFile", "path", "tcps: CA certificates (PEM) that client certificates must chain to.", "none"),
    leaf("CAPath", "path", "tcps: a directory of hashed CA certificates (c_rehash), as CAFile.", "none"),
    leaf("VerifyClient", "boolean", "tcps: require a client certificate that chains to CAFile/CAPath; a "
         "missing, expired or unknown certificate fails the handshake.", "false"),
    leaf("Ciphers", "text", "tcps: the OpenSSL cipher list (TLS 1.2; TLS 1.3 suites are OpenSSL's).",
         "OpenSSL's default"),
    *ignored("SecureSocketProtocols", "AllowUnverifiedPeer",
             note="tcps transports accept TLS 1.2 and 1.3 only, and always verify client certificates they ask "
                  "for"),
)

ADMIN = group(
    "Admin", "The HTTP admin server: the web console, Prometheus metrics and the /amps statistics tree.",
    leaf("InetAddr", "address", "Port or host:port of the admin HTTP server (web console at /). A bare port "
         "listens on 127.0.0.1 only; write 0.0.0.0:8085 (or a host) to serve other machines.",
         "none: no admin server"),
    leaf("Interval", "interval", "How often statistics are sampled; at least 1s.", "10s"),
    *ignored("FileName", note="statistics are kept in memory only"),
    _plugin_ref("Authentication", "HTTP basic authentication of Admin requests with this module (default: "
                "the instance's <Authentication>). With none, administrator endpoints answer loopback "
                "clients only."),
    leaf("AnonymousPaths", "regex", "Requests whose path matches this regex need no authentication (e.g. "
         "^/metrics$ for an open Prometheus scrape); /amps/administrator never matches.", "none"),
    leaf("WWWAuthenticate", "text", "Basic realm=\"...\": the challenge sent to unauthenticated requests "
         "(only Basic is supported).", "Basic realm=\"broker\""),
    *ignored("Header", "ExternalInetAddr", "AccessControlAllowOrigin",
             "SessionOptions", "SQLTransport", "SQLTransportInetAddr", "Galvanometer",
             note="the admin server has no Galvanometer or custom headers yet"),
    *ignored("Entitlement", note="the instance's Entitlement module decides the Admin port's permissions "
                             "(docs/security.md, Admin permissions)"),
    leaf("Certificate", "path", "HTTPS: the Admin server's certificate chain (PEM); with PrivateKey the Admin "
         "port serves https:// only.", "none: plain HTTP"),
    leaf("PrivateKey", "path", "HTTPS: the certificate's private key (PEM).", "none"),
    leaf("Ciphers", "text", "HTTPS: the OpenSSL cipher list.", "hypercorn's default"),
)

TRANSPORT = group(
    "Transport", "One listener for clients.",
    leaf("Name", "text", "Name of the transport, used in logs and statistics.", required=True),
    leaf("Type", "text", "Network type: tcp, or tcps (TLS: needs Certificate and PrivateKey). Other AMPS "
         "types (amps-unix, amps-replication...) are accepted with a warning and the transport is ignored.",
         required=True),
    # InetAddr and Protocol are required for tcp transports only; validate.py checks them.
    leaf("InetAddr", "address", "Port or host:port to listen on; a bare port listens on every address. "
         "Required."),
    leaf("Protocol", "text", "Header protocol: amps (json is a synonym) for AMPS over TCP, websocket for "
         "AMPS over WebSocket (the JavaScript client: ws://host:port/amps/json). The legacy protocols are "
         "accepted with a warning and the transport is ignored. Required."),
    leaf("MessageType", "message type", "Restrict the transport to one message type.",
         "any: the client's URI (/amps/json) chooses"),
    leaf("MaxMessageSize", "size", "Broker extension: the largest frame accepted (on a websocket transport: "
         "the largest message and the largest command); a bigger one closes the connection.", "64MB"),
    leaf("MaxLogonSize", "size", "Broker extension: the largest frame a connection may send before it "
         "logged on (its logon, with the credentials), at least 256 bytes; a bigger one closes the connection "
         "with a warning in the log, before its bytes are read. After a logon MaxMessageSize applies.", "64KB"),
    leaf("MaxMessageDepth", "count", "Broker extension: the deepest nesting of objects/arrays (json) or "
         "elements (xml) a published body may have, 1 to 200; a deeper body is refused with a parse "
         "error naming the limit.", "64"),
    leaf("MessageMemoryLimit", "size", "Outbound bytes buffered for one client before it is disconnected "
         "as a slow client.", "the instance MessageMemoryLimit, else 256MB"),
    leaf("LogonTimeout", "interval", "Broker extension: a connection that has not logged on this long after "
         "connecting is closed; 0s: never.", "10s"),
    leaf("IdleTimeout", "interval", "Broker extension: a connection from which nothing (not even a "
         "heartbeat) arrived this long is closed; 0s: never. Set it above the clients' heartbeat "
         "interval.", "0s: never"),
    *ignored("InitialState", note="the transport is enabled at start-up"),
    *_SLOW_CLIENT, *_SECURITY, *_TLS,
    *ignored("TransportFilter", note="messages are not rewritten"),
    *ignored("FileName", "FileMask", note="Unix-domain sockets are not supported"),
    *ignored("PerMessageDeflate", note="websocket messages are sent uncompressed (permessage-deflate is not "
             "negotiated)"),
    *ignored("HTTPHeader", "WWWAuthenticate", "TrustedAdmin",
             note="websocket handshakes carry no extra headers and are not authenticated; clients "
             "authenticate at logon (<Authentication>)"),
    repeatable=True,
)

PROTOCOLS = group(
    "Protocols", "Named protocols that transports refer to by Name in their <Protocol>.",
    group("Protocol", "A named protocol: a Transport whose <Protocol> is this Name speaks this Module.",
          leaf("Name", "text", "The name transports use in <Protocol>.", required=True),
          leaf("Module", "text", "The protocol spoken: amps or websocket.", required=True),
          *ignored("WWWAuthenticate", "TrustedAdmin", "HTTPHeader",
                   note="handshakes carry no extra headers and are not authenticated; clients authenticate "
                   "at logon (<Authentication>)"),
          repeatable=True),
)

MODULE = group(
    "Module", "A plugin module to load, as AMPS loads a shared library.",
    leaf("Name", "text", "Name the module is registered under.", required=True),
    leaf("Library", "text", "Dotted Python module path or .py file. AMPS's shipped "
         "libamps_id_chaining_key_generator.so maps to the built-in chaining key generator; other "
         "native .so libraries are ignored with a warning.", required=True),
    freeform("Options", "Module options: child tag -> text."),
    repeatable=True,
)


def _sow_topic(name: str) -> ElementSpec:
    return group(
        name, "A SOW topic: the last value of every record, by SOW key.",
        leaf("Name", "text", "Topic name.", required=True),
        leaf("Topic", "text", "Pre-5.0 spelling of Name.", synonym_of="Name"),
        leaf("MessageType", "message type", "Message type of the topic: json, xml or binary.", required=True),
        leaf("Key", "text", "Path of a key field (/id); several Keys form a composite key.",
             "none: publishers supply SowKey", repeatable=True),
        leaf("KeyDomain", "text", "Seed of the key checksum; topics sharing it (and their Keys) produce "
             "equal SowKeys. Needs Key.", "the topic Name"),
        _plugin_ref("KeyGenerator", "A key generator plugin instead of the default checksum over Key."),
        _plugin_ref("Storage", "Broker extension: the storage engine plugin that holds the topic, with its "
                    "Options.", ),
        leaf("FileName", "path", "Where the topic is stored (LevelDB); %n becomes the topic name. Relative "
             "paths are relative to the working directory, as in AMPS. Required unless Durability is "
             "transient."),
        leaf("Durability", "persistent|transient", "persistent: stored in FileName; transient: in memory "
             "only.", "persistent"),
        leaf("Duration", "persistent|transient", "Synonym of Durability.", synonym_of="Durability"),
        leaf("Expiration", "disabled|enabled|interval", "disabled; enabled (only per-message expiration); or "
             "the default lifetime of a record. Must be disabled with History.", "disabled"),
        group("History", "Keep past versions of records for historical SOW queries.",
              leaf("Window", "interval", "How long past versions are kept.", required=True),
              leaf("Granularity", "interval", "Keep at most one version per this interval (0s: every "
                   "update).", "0s")),
        leaf("RecordCacheMemoryLimit", "size", "Broker extension: memory for the topic's most recently used "
             "records (keys and values) in front of its storage engine, which answers the read of the record a "
             "publish replaces. Records beyond it are read from the storage engine (for LevelDB a point read, "
             "several microseconds, and more at millions of records). It is loaded from the storage engine when "
             "the broker starts (1M records in about 1.6 s). Size it to hold the topic's hot records, or all of "
             "them (about the record's size plus 150 bytes each); 0 turns the cache off.", "64MB"),
        *ignored("RecoveryPoint", "Pattern", "Preprocessing", "Enrichment",
                 note="the topic is used without it"),
        *ignored("SlabSize", "InitialSlabCount", "ExpectedKeyCountHint", "HashIndex", "Index",
                 note="storage sizing and indexes are managed by the storage engine"),
        *obsolete("RecordSize", "IncrementSize", "InitialSize", "IncreaseSize",
                  note="pre-5.0 storage sizing, replaced by SlabSize"),
        repeatable=True,
    )


_SOW_IGNORED = (
    *ignored("Queue", "LocalQueue", "GroupLocalQueue", "QueueDefinition", note="message queues are not "
             "supported yet"),
    *ignored("View", "ViewDefinition", note="views are not supported yet"),
    *ignored("ConflatedTopic", "ReplicaDefinition", note="conflated topics are not supported yet"),
)

TRANSACTION_LOG = group(
    "TransactionLog", "The journal: publishes on matching topics are recorded for replay and recovery.",
    leaf("JournalDirectory", "path", "Where journal files are written.", required=True),
    leaf("JournalArchiveDirectory", "path", "Where amps-action-do-archive-journal moves old journals.",
         "none"),
    leaf("PreallocatedJournalFiles", "count", "Journal files created ahead of need; at least 1.", "2"),
    leaf("JournalSize", "size", "Size of one journal file; smaller than 10MB is raised to 10MB with a "
         "warning.", "1GB"),
    leaf("MinJournalSize", "size", "Synonym of JournalSize.", synonym_of="JournalSize"),
    leaf("FlushInterval", "interval", "Longest time a write waits before the journal is flushed; "
         "1us to 1s.", "100ms"),
    leaf("DamagedRecords", "text", "Broker extension: what to do with a damaged journal record (not a torn "
         "tail): stop (refuse to start, fail the replay) or skip (log, count, keep every later record).",
         "stop"),
    group("Topic", "Topics to record.",
          leaf("Name", "text", "Topic name or regular expression (.* records everything).", required=True),
          leaf("MessageType", "message type", "Message type of the recorded topic.", required=True),
          repeatable=True),
    leaf("InactiveClientAckExpiration", "interval", "De-duplication entries of a publisher that persisted "
         "nothing for this long are dropped (it starts afresh when it comes back), for logged and unlogged "
         "topics alike; 0s: never.", "0s: never"),
    leaf("PublisherSequenceJumpLimit", "count", "Broker extension: a publish whose sequence (s) is more "
         "than this above its publisher's last one is refused (an impostor's huge s would otherwise make "
         "the real publisher's later publishes look like duplicates). On an open transport a publisher the "
         "broker has no record of starts from zero: its first s may be at most this, or an official "
         "client's publish-store sequence (the current time in milliseconds times a million); an "
         "authenticated publisher may start anywhere. 0: no limit. It applies to every publish, logged or "
         "not (without a TransactionLog, the default holds). Trade-off: a client numbering its own "
         "publishes whose state the broker lost (journal deleted, entries expired) is refused until the "
         "limit is raised (docs/security.md).", "1000000"),
    *ignored("O_DIRECT", "CompressedJournalCacheMemoryLimit",
             note="the journal is written with buffered I/O and publisher records are kept"),
)

ACTION = group(
    "Action", "Something to do when a trigger fires.",
    _plugin_ref("On", "Trigger module (amps-action-on-*); several On: any of them fires.", repeatable=True,
                required=True),
    _plugin_ref("If", "Condition module (amps-action-if-*); gates the Do steps after it.", repeatable=True),
    _plugin_ref("Do", "Step module (amps-action-do-*), run in order.", repeatable=True, required=True),
    repeatable=True,
)

LOGGING = group(
    "Logging", "Where the broker logs. Without a Target the broker logs to stderr at --log-level.",
    group("Target", "One destination of the log.",
          leaf("Protocol", "file|stdout|stderr", "Where the lines go. gzip and syslog are accepted with a "
               "warning and the target is ignored.", required=True),
          leaf("FileName", "path", "File name mask of a file target: strftime tokens (%Y %m %d %H %M %S ...) "
               "in local time and %n (the file's sequence number in this run, 00000, 00001...); "
               "directories are created, an existing file is appended to. "
               "amps-action-do-rotate-logs opens the name the mask gives then.", "%Y-%m-%dT%H%M%S.log"),
          leaf("Level", "level", "Lowest level written: developer, trace, stats, info, warning, error, "
               "critical, emergency, or none (debug is AMPS's obsolete synonym of info).",
               "the --log-level option (info)"),
          leaf("Levels", "text", "Comma-separated levels written in addition to Level and above."),
          *ignored("IncludeErrors", "ExcludeErrors",
                   note="the broker's <Logging> lines carry no AMPS message ids: every line at the "
                        "target's levels is written"),
          *ignored("RotationThreshold", note="log files are rotated by amps-action-do-rotate-logs only"),
          *ignored("Ident", "Options", "Facility", note="syslog targets are not supported"),
          repeatable=True),
)

ROOT = group(
    "AMPSConfig", "The configuration.",
    leaf("Name", "text", "Instance name, used in logs, journal file names and the admin interface.",
         required=True),
    ADMIN,
    group("Transports", "Listeners for clients.", TRANSPORT, repeatable=True),
    group("Modules", "Plugin modules to load.", MODULE, repeatable=True),
    group("SOW", "State-of-the-world topics.", _sow_topic("Topic"), *_SOW_IGNORED, repeatable=True),
    group("TopicMetaData", "Pre-5.0 spelling of SOW; its TopicDefinition takes the children of SOW/Topic.",
          _sow_topic("TopicDefinition"), *_SOW_IGNORED,
          repeatable=True),
    TRANSACTION_LOG,
    group("Actions", "Automation: triggers, conditions and steps.", ACTION, repeatable=True),
    leaf("MessageMemoryLimit", "size", "Default per-client outbound buffer for transports that do not set "
         "their own.", "256MB"),
    leaf("TotalMessageMemoryLimit", "size", "Broker extension: client buffers of all connections together, "
         "outbound queues and frames being received. A frame whose declared size does not fit closes its "
         "connection before its payload is read, unless it is an ordinary one (at most a tenth of the "
         "limit) of a logged-on client: then the largest consumers are offlined first to make room, so a "
         "publisher does not lose "
         "its connection to consumers that stopped reading; outbound queues past it offline the largest "
         "consumers first (as slow clients). 0: no limit.", "1GB"),
    leaf("AllowClientNameTakeover", "boolean", "Broker extension: with authentication, a logon under a "
         "client name that another user is using, or used within the de-duplication window "
         "(<InactiveClientAckExpiration>; 0s: while the broker runs), is refused with 'name in use'; true: it "
         "disconnects that user instead (AMPS's behaviour). Publisher de-duplication is kept per user and "
         "client name either way (docs/security.md).", "false"),
    leaf("ShutdownTimeout", "interval", "Broker extension: on SIGTERM (or a shutdown action) the broker stops "
         "accepting, lets each client finish the commands it sent and get their persisted acks, then closes "
         "it; what is still open this long after the on-shutdown actions is closed at once. "
         "A second SIGTERM or Ctrl-C stops waiting.", "10s"),
    leaf("MaxFilterLength", "count", "Broker extension: the longest content filter a client may "
         "send, in characters, 1 to 262144; a longer one is refused with a bad filter failure naming the "
         "limit. Filters of 2 KiB and more compile in a worker thread.", "32768"),
    leaf("MaxFilterDepth", "count", "Broker extension: the deepest nesting (parentheses, NOT) of a content "
         "filter, 1 to 100; a deeper one is refused with a bad filter failure naming the limit.", "40"),
    leaf("ConfigIncludeCommentDefault", "boolean", "Default of <Include comment=\"...\">: mark included text "
         "with comments in the expanded configuration.", "false"),
    leaf("ConfigCycleDetectionThreshold", "size", "Largest total size of the configuration with every "
         "include expanded.", "5MB"),
    leaf("ConfigValidation", "boolean", "disabled: elements AMPS does not know become warnings instead of "
         "errors.", "enabled"),
    *ignored("Group", "ProcessName", "Description", "Environment", "SuggestedMinimumVersion",
             "RequiredMinimumVersion", "MiniDumpDirectory", "MiniDumpFileMask",
             note="instance metadata the broker does not use", repeatable=False),
    *ignored("RegexTopicSupport", note="topic names in subscriptions are always regular expressions",
             repeatable=False),
    *ignored("SOWStatsInterval", "SOWStatisticsInterval", note="/AMPS/SOWStats events are not published",
             repeatable=False),
    *_SLOW_CLIENT, *_SECURITY,
    *ignored("Tuning", "Externals", "UserDefinedFunctions", note="not applicable to the broker"),
    PROTOCOLS,
    *ignored("MessageTypes", note="the built-in json, xml and binary message types are used"),
    LOGGING,
    *ignored("Replication", note="replication is not supported yet"),
)

def _index(spec: ElementSpec, path: str, out: dict[str, list[str]]) -> dict[str, list[str]]:
    for child in spec.children:
        out.setdefault(child.name, []).append(path)
        if child.support is Support.SUPPORTED:
            _index(child, f"{path}/{child.name}", out)
    return out


#: Where each element name may appear, for "<Key> belongs in ..." hints.
_PLACES = _index(ROOT, "/AMPSConfig", {})


# -- checking a tree against the spec -------------------------------------------------------------------

def suggestion(name: str, candidates: list[str]) -> str | None:
    """The closest known name to ``name`` (case first, then spelling), or ``None``."""
    for candidate in candidates:
        if candidate.lower() == name.lower():
            return candidate
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def _unknown_message(tag: str, parent_tag: str, spec: ElementSpec) -> str:
    known = [c.name for c in spec.children]
    message = f"<{tag}> is not an AMPS element that can appear in <{parent_tag}>"
    close = suggestion(tag, known)
    if close is not None:
        case = " (names are case-sensitive)" if close.lower() == tag.lower() else ""
        return f"{message}. Did you mean <{close}>?{case}"
    places = _PLACES.get(tag)
    if places:
        return f"{message}; it belongs in {' or '.join(places)}"
    return f"{message}. Allowed here: {', '.join(sorted(known))}"


def ignored_message(spec: ElementSpec) -> str:
    """The warning for an element the broker accepts and does not use."""
    if spec.support is Support.OBSOLETE:
        return f"<{spec.name}> is obsolete in AMPS and ignored" + (f" ({spec.doc})" if spec.doc else "")
    note = f": {spec.doc}" if spec.doc else ""
    return f"<{spec.name}> is not supported by the broker yet and is ignored{note}"


def check_tree(root: etree._Element, log: IssueLog) -> None:
    """Report unknown, ignored, repeated and misused elements under ``root`` (an ``<AMPSConfig>``)."""
    text = (root.text or "").strip() + "".join((g.tail or "").strip() for g in root)
    if text:
        _report_text(root, text, log)
    _check(root, ROOT, log)


def _check(el: etree._Element, spec: ElementSpec, log: IssueLog) -> None:
    children = [c for c in el if is_element(c) and c.tag != "Include"]
    counts = Counter(c.tag for c in children)
    _check_required(el, spec, counts, log)
    seen: Counter[str] = Counter()
    for child in children:
        tag = str(child.tag)
        seen[tag] += 1
        child_spec = spec.child(tag)
        if child_spec is None:
            log.unknown(child, _unknown_message(tag, str(el.tag), spec))
            continue
        if child_spec.support in (Support.IGNORED, Support.OBSOLETE):
            if seen[tag] == 1:  # one warning per element name and parent
                times = f" ({counts[tag]} times)" if counts[tag] > 1 else ""
                log.warn(child, ignored_message(child_spec) + times)
            continue
        if not child_spec.repeatable and seen[tag] == 2:
            log.error(child, f"<{tag}> appears {counts[tag]} times in <{el.tag}>; keep one")
        if child_spec.support is Support.FREEFORM:
            continue
        if child_spec.is_leaf:
            if any(is_element(g) for g in child):
                log.error(child, f"<{tag}> holds a value ({child_spec.type}), not elements")
        else:
            text = (child.text or "").strip() + "".join((g.tail or "").strip() for g in child)
            if text:
                _report_text(child, text, log)
            _check(child, child_spec, log)


def _report_text(el: etree._Element, text: str, log: IssueLog) -> None:
    """Text in a container. Text an ``<Include>`` put there is reported at the included file and never
    quoted (the file may be anything the broker can read); text written in place is quoted."""
    included = log.included_text_at(el)
    if included is not None:
        log.error(included, f"the included file puts text into <{el.tag}>, which holds elements: include "
                            "a file of XML elements here, or include a value inside a value element such "
                            "as <Name> (the file's contents are not shown)")
    else:
        log.error(el, f"<{el.tag}> holds elements, not text (found {text[:30]!r})")


def _check_required(el: etree._Element, spec: ElementSpec, counts: Counter[str], log: IssueLog) -> None:
    for child_spec in spec.children:
        if child_spec.synonym_of and counts[child_spec.name] and counts[child_spec.synonym_of]:
            log.error(el, f"<{el.tag}> has both <{child_spec.synonym_of}> and its synonym "
                          f"<{child_spec.name}>; keep one")
        if not child_spec.required or counts[child_spec.name]:
            continue
        if any(counts[s.name] for s in spec.children if s.synonym_of == child_spec.name):
            continue
        log.error(el, f"<{el.tag}> has no <{child_spec.name}>: add one ({child_spec.doc.rstrip('.')})")


def reference_rows(spec: ElementSpec = ROOT, path: str = "") -> Iterator[tuple[str, ElementSpec]]:
    """``(path, spec)`` of every supported element, depth first, for the documentation table."""
    here = f"{path}/{spec.name}"
    yield here, spec
    for child in spec.children:
        if child.support in (Support.SUPPORTED, Support.FREEFORM):
            yield from reference_rows(child, here)


def ignored_names(spec: ElementSpec = ROOT, path: str = "") -> Iterator[tuple[str, ElementSpec]]:
    """``(path, spec)`` of every element accepted with a warning, for the documentation."""
    here = f"{path}/{spec.name}"
    for child in spec.children:
        if child.support in (Support.IGNORED, Support.OBSOLETE):
            yield f"{here}/{child.name}", child
        elif child.support is Support.SUPPORTED:
            yield from ignored_names(child, here)
