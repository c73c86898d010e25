"""Building the :class:`~broker.config.model.Config` from the expanded, schema-checked tree.

Every problem is recorded in the :class:`~broker.config.issues.IssueLog` and building carries on, so one
run reports all of them. Cross-checks between elements (duplicate names and ports, ``History`` with
``Expiration``, ``KeyDomain`` without ``Key``, ...) run after the sections are built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lxml import etree

from broker.config.catalog import (
    ACTION_MODULES,
    LIBRARY_ALIASES,
    SUPPORTED_MESSAGE_TYPES,
    SUPPORTED_PROTOCOLS,
    SUPPORTED_TRANSPORT_TYPES,
    UNSUPPORTED_MESSAGE_TYPES,
    UNSUPPORTED_PROTOCOLS,
    UNSUPPORTED_TRANSPORT_TYPES,
    is_native_library,
)
from broker.config.elements import Reader, child, children, options_of, text_of
from broker.config.issues import IssueLog
from broker.config.log_targets import build_logging
from broker.config.model import (
    DEFAULT_CLIENT_BUFFER,
    DEFAULT_LOGON_TIMEOUT,
    DEFAULT_MAX_LOGON_SIZE,
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_SHUTDOWN_TIMEOUT,
    DEFAULT_TOTAL_MEMORY_LIMIT,
    ActionConfig,
    AdminConfig,
    Config,
    ModuleConfig,
    PluginRef,
    TlsConfig,
    TransportConfig,
    Where,
)
from broker.config.schema import suggestion
from broker.config.sow_topics import build_sow_topics
from broker.config.transaction_log import build_transaction_log
from broker.config.values import ANY_HOST, parse_address, parse_count
from broker.expr import MAX_FILTER_DEPTH, MAX_FILTER_LENGTH
from broker.messagetypes import DEFAULT_MAX_DEPTH, MAX_DEPTH_LIMIT

_WILDCARD_HOSTS = {ANY_HOST, "::", ""}


@dataclass
class _Context:
    """What one section needs from another (filled while building)."""

    #: ``<Modules>`` names served by a built-in plugin (AMPS's shipped chaining library).
    module_aliases: dict[str, str] = field(default_factory=dict)
    #: The ``<Options>`` of those modules: defaults under the options given where they are used.
    alias_options: dict[str, Mapping[str, str]] = field(default_factory=dict)
    #: ``<Modules>`` names whose native library the broker cannot load, by library.
    native_modules: dict[str, str] = field(default_factory=dict)
    #: Listening addresses, for duplicate-port checks: (host, port, transport name, where).
    addresses: list[tuple[str, int, str, Where]] = field(default_factory=list)


def check_message_type(reader: Reader, el: etree._Element | None) -> str | None:
    """The message type named by ``el`` (lower-cased), or ``None`` after an error."""
    if el is None:
        return None
    name = text_of(el)
    lowered = name.lower()
    if lowered in SUPPORTED_MESSAGE_TYPES:
        return lowered
    if not name:
        reader.log.error(el, f"<{el.tag}> is empty: write json, xml or binary")
    elif lowered in UNSUPPORTED_MESSAGE_TYPES:
        reader.log.error(el, f"message type {name!r} is not supported yet: use json, xml or binary")
    else:
        close = suggestion(lowered, [*SUPPORTED_MESSAGE_TYPES, *UNSUPPORTED_MESSAGE_TYPES])
        hint = f" Did you mean {close!r}?" if close else ""
        reader.log.error(el, f"unknown message type {name!r}: use json, xml or binary "
                             f"(custom <MessageTypes> are not supported).{hint}")
    return None


def build_config(root: etree._Element, log: IssueLog) -> Config | None:
    """Build the configuration from ``root``; ``None`` when a required part is unusable.

    Errors and warnings go to ``log``; the caller raises when there are errors.
    """
    reader = Reader(log)
    context = _Context()
    name = reader.text(root, "Name")
    if name is not None and re.search(r"[\s/\\$~]", name):
        log.warn(child(root, "Name"), f"instance name {name!r} contains a space or one of / \\ $ ~, which "
                 "AMPS advises against (the name is used in file names)")
    client_buffer = reader.size(root, "MessageMemoryLimit", default=DEFAULT_CLIENT_BUFFER)
    total_memory = reader.size(root, "TotalMessageMemoryLimit", default=DEFAULT_TOTAL_MEMORY_LIMIT)
    filter_length = reader.value_of(root, "MaxFilterLength", _filter_length, MAX_FILTER_LENGTH)
    filter_depth = reader.value_of(root, "MaxFilterDepth", _filter_depth, MAX_FILTER_DEPTH)
    # Read for their errors: the loader already applied them.
    reader.boolean(root, "ConfigIncludeCommentDefault", False)
    reader.size(root, "ConfigCycleDetectionThreshold", default=0)
    reader.boolean(root, "ConfigValidation", True)
    takeover = reader.boolean(root, "AllowClientNameTakeover", False)
    shutdown_timeout = reader.interval(root, "ShutdownTimeout", default=DEFAULT_SHUTDOWN_TIMEOUT)

    modules = _modules(reader, root, context)
    admin = _admin(reader, child(root, "Admin"), context)
    transports = _transports(reader, root, context, client_buffer or DEFAULT_CLIENT_BUFFER)
    _check_ports(log, context, admin)
    sow_topics = build_sow_topics(reader, root, lambda el: check_message_type(reader, el),
                                  lambda ref: _resolve_module(reader, ref, context))
    transaction_log = build_transaction_log(reader, child(root, "TransactionLog"),
                                            lambda el: check_message_type(reader, el))
    actions = _actions(reader, root)
    logging_config = build_logging(reader, child(root, "Logging"))
    authentication, entitlement = _security(reader, root)
    if name is None or total_memory is None or filter_length is None or filter_depth is None or takeover is None \
            or shutdown_timeout is None:
        return None
    return Config(name=name, admin=admin, transports=transports, modules=modules, sow_topics=sow_topics,
                  transaction_log=transaction_log, actions=actions, logging=logging_config,
                  total_memory_limit=total_memory, authentication=authentication, entitlement=entitlement,
                  max_filter_length=filter_length, max_filter_depth=filter_depth,
                  allow_client_name_takeover=takeover, shutdown_timeout=shutdown_timeout)


def _security(reader: Reader, el: etree._Element) -> tuple[PluginRef | None, PluginRef | None]:
    """``<Authentication>`` and ``<Entitlement>`` of ``el`` (the instance, a transport)."""
    refs = []
    for tag in ("Authentication", "Entitlement"):
        found = child(el, tag)
        refs.append(reader.plugin_ref(found) if found is not None else None)
    return refs[0], refs[1]


#: The largest ``<MaxFilterLength>``: compiling costs 2-6 microseconds per character (in a worker thread,
#: but holding the GIL and memory while it runs).
MAX_FILTER_LENGTH_LIMIT = 256 * 1024
#: The largest ``<MaxFilterDepth>``: parsing and compiling recurse a few frames per level, and Python's
#: recursion limit is reached at about 150.
MAX_FILTER_DEPTH_LIMIT = 100


def _bounded_count(name: str, maximum: int, why: str) -> Callable[[str], int]:
    """A parser of a count element ``name``: 1 to ``maximum`` (``why`` says what the bound protects)."""

    def parse(text: str) -> int:
        value = parse_count(text, minimum=1)
        if value > maximum:
            raise ValueError(f"{name} {value} is too large: the maximum is {maximum}, {why}")
        return value

    return parse


#: ``<MaxFilterLength>``: characters, 1 to :data:`MAX_FILTER_LENGTH_LIMIT`.
_filter_length = _bounded_count("MaxFilterLength", MAX_FILTER_LENGTH_LIMIT,
                                "as a filter costs 2-6 microseconds per character to compile")
#: ``<MaxFilterDepth>``: levels, 1 to :data:`MAX_FILTER_DEPTH_LIMIT`.
_filter_depth = _bounded_count("MaxFilterDepth", MAX_FILTER_DEPTH_LIMIT,
                               "which keeps parsing and compiling a filter within Python's recursion limit")


# -- Admin -------------------------------------------------------------------------------------------------

def _admin(reader: Reader, el: etree._Element | None, context: _Context) -> AdminConfig | None:
    if el is None:
        return None
    interval = reader.interval(el, "Interval", default=10.0)
    if interval is not None and interval < 1.0:
        reader.log.error(child(el, "Interval"), "the statistics interval must be at least 1s")
    address = reader.value_of(el, "InetAddr", parse_address, None)
    if child(el, "InetAddr") is None:
        reader.log.warn(el, "<Admin> has no <InetAddr>: the admin HTTP server is not started "
                            "(add e.g. <InetAddr>8085</InetAddr>)")
        return None
    anonymous = reader.text(el, "AnonymousPaths")
    if anonymous is not None:
        try:
            re.compile(anonymous)
        except re.error as exc:
            reader.log.error(child(el, "AnonymousPaths"), f"AnonymousPaths is not a regular expression: {exc}")
            return None
    realm = "broker"
    challenge = reader.text(el, "WWWAuthenticate")
    if challenge is not None:
        match = re.fullmatch(r'\s*Basic(?:\s+realm\s*=\s*"([^"]*)")?\s*', challenge, re.IGNORECASE)
        if match is None:
            reader.log.error(child(el, "WWWAuthenticate"), f"WWWAuthenticate {challenge!r} is not supported: "
                             'only HTTP basic authentication is, write Basic realm="name"')
            return None
        realm = match.group(1) or realm
    if address is None or interval is None:
        return None
    host = address[0]
    if text_of(child(el, "InetAddr")).strip().isdigit():
        # A bare port: loopback only. The console and the administrator actions (which change state) are
        # reachable from other hosts only when the config names an address (0.0.0.0:8085).
        host = "127.0.0.1"
    authentication = child(el, "Authentication")
    certificate, private_key = reader.text(el, "Certificate"), reader.text(el, "PrivateKey")
    if (certificate is None) != (private_key is None):
        missing = "PrivateKey" if private_key is None else "Certificate"
        reader.log.error(el, f"<Admin> has one of <Certificate> and <PrivateKey>: add <{missing}> to serve HTTPS, "
                             "or remove the other")
        return None
    return AdminConfig(host=host, port=address[1], interval=interval, where=reader.where(el),
                       authentication=reader.plugin_ref(authentication) if authentication is not None else None,
                       anonymous_paths=anonymous, realm=realm, certificate=certificate, private_key=private_key,
                       ciphers=reader.text(el, "Ciphers"))


# -- Transports --------------------------------------------------------------------------------------------

def _transports(reader: Reader, root: etree._Element, context: _Context, client_buffer: int
                ) -> tuple[TransportConfig, ...]:
    log = reader.log
    result: list[TransportConfig] = []
    names: dict[str, Where] = {}
    # <Protocols><Protocol><Name>my-ws</Name><Module>websocket</Module>: a transport's <Protocol>my-ws</Protocol>.
    custom_protocols = {text_of(n): text_of(child(proto, "Module")) if child(proto, "Module") is not None else ""
                        for p in children(root, "Protocols") for proto in children(p, "Protocol")
                        for n in children(proto, "Name")}
    for el in (t for ts in children(root, "Transports") for t in children(ts, "Transport")):
        where = reader.where(el)
        name = reader.text(el, "Name")
        if name is not None:
            if name in names:
                log.error(child(el, "Name"), f"transport name {name!r} is already used at "
                          f"{names[name].file}:{names[name].line}; give each transport its own Name")
            else:
                names[name] = where
        type_el = child(el, "Type")
        type_ = text_of(type_el).lower() if type_el is not None else None
        address_el = child(el, "InetAddr")
        if type_ is not None and type_ not in SUPPORTED_TRANSPORT_TYPES:
            if type_ in UNSUPPORTED_TRANSPORT_TYPES:
                _note_address(address_el, name, where, context)
                log.drop_warnings_under(where.path)
                log.warn(el, f"transport {name or '?'!r} of Type {type_!r} is not supported yet and is "
                             "ignored (only tcp and tcps are served)")
            else:
                close = suggestion(type_, [*SUPPORTED_TRANSPORT_TYPES, *UNSUPPORTED_TRANSPORT_TYPES])
                hint = f" Did you mean {close!r}?" if close else ""
                log.error(type_el, f"unknown transport Type {text_of(type_el)!r}: use tcp or tcps.{hint}")
            continue
        protocol = _protocol(reader, el, name, where, custom_protocols)
        if protocol == "":  # accepted but not served
            _note_address(address_el, name, where, context)
            continue
        if address_el is None:
            log.error(el, f"transport {name or '?'!r} has no <InetAddr>: add the port to listen on, "
                          "e.g. <InetAddr>9007</InetAddr>")
        address = reader.value_of(el, "InetAddr", parse_address, None)
        message_type_el = child(el, "MessageType")
        message_type = check_message_type(reader, message_type_el)
        max_size = reader.size(el, "MaxMessageSize", default=DEFAULT_MAX_MESSAGE_SIZE)
        if max_size is not None and max_size <= 0:
            log.error(child(el, "MaxMessageSize"), "MaxMessageSize must be greater than 0")
        buffer = _memory_limit(reader, el, client_buffer)
        logon_timeout = reader.interval(el, "LogonTimeout", default=DEFAULT_LOGON_TIMEOUT)
        max_logon = reader.size(el, "MaxLogonSize", default=DEFAULT_MAX_LOGON_SIZE)
        if max_logon is not None and max_logon < 256:
            log.error(child(el, "MaxLogonSize"), f"MaxLogonSize must be at least 256 bytes (a logon frame with "
                                                 f"its credentials), got {max_logon}; the default is 64KB")
            max_logon = None
        idle_timeout = reader.interval(el, "IdleTimeout", default=0.0)
        max_depth = reader.value_of(el, "MaxMessageDepth", _message_depth, DEFAULT_MAX_DEPTH)
        if address is not None and name is not None:
            context.addresses.append((address[0], address[1], name, reader.where(address_el)))
        if None in (name, address, protocol, max_size, max_logon, buffer, logon_timeout, idle_timeout, max_depth) or (
                message_type_el is not None
                                                                   and message_type is None):
            continue
        assert name is not None and address is not None and protocol is not None
        assert max_size is not None and max_logon is not None and buffer is not None
        assert logon_timeout is not None and idle_timeout is not None and max_depth is not None
        tls = _tls(reader, el, name, type_ == "tcps")
        if type_ == "tcps" and tls is None:
            continue
        authentication, entitlement = _security(reader, el)
        result.append(TransportConfig(name=name, type=type_ or "tcp", host=address[0], port=address[1],
                                      protocol=protocol, message_type=message_type,
                                      max_message_size=max_size, max_logon_size=max_logon, client_buffer=buffer,
                                      logon_timeout=logon_timeout, idle_timeout=idle_timeout,
                                      max_message_depth=max_depth, where=where,
                                      authentication=authentication, entitlement=entitlement, tls=tls))
    return tuple(result)


_TLS_ELEMENTS = ("Certificate", "PrivateKey", "CAFile", "CAPath", "VerifyClient", "Ciphers")


def _tls(reader: Reader, el: etree._Element, name: str, secure: bool) -> TlsConfig | None:
    """The TLS settings of a ``tcps`` transport; ``None`` for ``tcp`` (its TLS elements are warned about) or
    after an error."""
    log = reader.log
    if not secure:
        for tag in _TLS_ELEMENTS:
            found = child(el, tag)
            if found is not None:
                log.warn(found, f"<{tag}> is ignored on transport {name!r} of Type tcp: write "
                                "<Type>tcps</Type> to serve TLS")
        return None
    certificate = reader.text(el, "Certificate")
    private_key = reader.text(el, "PrivateKey")
    verify = reader.boolean(el, "VerifyClient", False)
    ca_file, ca_path = reader.text(el, "CAFile"), reader.text(el, "CAPath")
    ok = verify is not None
    for tag, value in (("Certificate", certificate), ("PrivateKey", private_key)):
        if value is None:
            if child(el, tag) is None:
                log.error(el, f"tcps transport {name!r} has no <{tag}>: add the PEM file")
            ok = False
    if verify and ca_file is None and ca_path is None:
        log.error(child(el, "VerifyClient"), f"tcps transport {name!r} verifies client certificates but has "
                  "no <CAFile> or <CAPath> to verify them against")
        ok = False
    if not ok:
        return None
    assert certificate is not None and private_key is not None
    return TlsConfig(certificate=certificate, private_key=private_key, ca_file=ca_file, ca_path=ca_path,
                     verify_client=bool(verify), ciphers=reader.text(el, "Ciphers"))


def _message_depth(text: str) -> int:
    """``<MaxMessageDepth>``: 1 to :data:`MAX_DEPTH_LIMIT` (merge and diff recurse once per level)."""
    value = parse_count(text, minimum=1)
    if value > MAX_DEPTH_LIMIT:
        raise ValueError(f"{value} is too large: the maximum is {MAX_DEPTH_LIMIT}, which keeps merging and "
                         "comparing documents within Python's recursion limit")
    return value


def _protocol(reader: Reader, el: etree._Element, name: str | None, where: Where,
              custom: dict[str, str]) -> str | None:
    """``"amps"`` or ``"websocket"`` (a ``<Protocols>`` name stands for its Module); ``""`` for a known
    protocol the broker does not serve (warned); ``None`` on error."""
    log = reader.log
    proto_el = child(el, "Protocol")
    if proto_el is None:
        log.error(el, f"transport {name or '?'!r} has no <Protocol>: add <Protocol>amps</Protocol>")
        return None
    proto = text_of(proto_el)
    lowered = proto.lower()
    if lowered in SUPPORTED_PROTOCOLS:
        return SUPPORTED_PROTOCOLS[lowered]
    if custom.get(proto, "").lower() in SUPPORTED_PROTOCOLS:
        return SUPPORTED_PROTOCOLS[custom[proto].lower()]
    if lowered in UNSUPPORTED_PROTOCOLS or proto in custom:
        log.drop_warnings_under(where.path)
        log.warn(el, f"transport {name or '?'!r} with Protocol {proto!r} is not supported yet and is "
                     "ignored (amps and websocket are served)")
        return ""
    close = suggestion(lowered, [*SUPPORTED_PROTOCOLS, *UNSUPPORTED_PROTOCOLS])
    hint = f" Did you mean {close!r}?" if close else ""
    log.error(proto_el, f"unknown Protocol {proto!r}: use amps or websocket.{hint}")
    return None


def _memory_limit(reader: Reader, el: etree._Element, default: int) -> int | None:
    limit_el = child(el, "MessageMemoryLimit")
    if limit_el is not None and text_of(limit_el).endswith("%"):
        reader.log.warn(limit_el, "a percentage MessageMemoryLimit is not supported yet; using "
                                  f"{default} bytes (write a size such as 512MB)")
        return default
    limit = reader.size(el, "MessageMemoryLimit", default=default)
    if limit is not None and limit <= 0:
        reader.log.error(limit_el, "MessageMemoryLimit must be greater than 0")
        return None
    return limit


def _note_address(address_el: etree._Element | None, name: str | None, where: Where,
                  context: _Context) -> None:
    """Remember the port of an ignored transport: it would still clash in AMPS."""
    if address_el is None or name is None:
        return
    try:
        host, port = parse_address(text_of(address_el))
    except ValueError:
        return
    context.addresses.append((host, port, name, where))


def _check_ports(log: IssueLog, context: _Context, admin: AdminConfig | None) -> None:
    addresses = list(context.addresses)
    if admin is not None:
        addresses.append((admin.host, admin.port, "the admin server", admin.where))
    for i, (host, port, name, where) in enumerate(addresses):
        for other_host, other_port, other_name, other_where in addresses[:i]:
            if port == 0 or port != other_port:
                continue
            if host == other_host or host in _WILDCARD_HOSTS or other_host in _WILDCARD_HOSTS:
                log.error(where, f"port {port} of {_label(name)} is already used by {_label(other_name)} "
                          f"({other_where.file}:{other_where.line}); choose another port")
                break


def _label(name: str) -> str:
    return name if name.startswith("the ") else f"transport {name!r}"


# -- Modules -----------------------------------------------------------------------------------------------

def _modules(reader: Reader, root: etree._Element, context: _Context) -> tuple[ModuleConfig, ...]:
    log = reader.log
    result: list[ModuleConfig] = []
    seen: dict[str, Where] = {}
    for el in (m for ms in children(root, "Modules") for m in children(ms, "Module")):
        name, library = reader.text(el, "Name"), reader.text(el, "Library")
        if name is None or library is None:
            continue
        if name in seen:
            log.error(child(el, "Name"), f"module name {name!r} is already used at "
                      f"{seen[name].file}:{seen[name].line}; give each module its own Name")
            continue
        seen[name] = reader.where(el)
        base = library.replace("\\", "/").rsplit("/", 1)[-1]
        if base in LIBRARY_ALIASES:
            context.module_aliases[name] = LIBRARY_ALIASES[base]
            context.alias_options[name] = options_of(child(el, "Options"))
            continue
        if is_native_library(library):
            context.native_modules[name] = library
            log.warn(el, f"module {name!r}: {library!r} is a native AMPS library, which the broker cannot "
                         "load; the module is ignored")
            continue
        result.append(ModuleConfig(name=name, library=library, options=options_of(child(el, "Options")),
                                   where=reader.where(el)))
    return tuple(result)


def _resolve_module(reader: Reader, ref: PluginRef, context: _Context) -> PluginRef | None:
    """Map a ``<Modules>`` name served by a built-in; reject one whose native library was ignored."""
    if ref.module in context.module_aliases:
        options = MappingProxyType({**context.alias_options[ref.module], **ref.options})
        return PluginRef(context.module_aliases[ref.module], options, ref.where)
    if ref.module in context.native_modules:
        reader.log.error(ref.where, f"<Module>{ref.module}</Module> is the native library "
                         f"{context.native_modules[ref.module]!r}, which the broker cannot load: write it "
                         "as a broker plugin (docs/plugins.md) and name that plugin here")
        return None
    return ref


# -- Actions -----------------------------------------------------------------------------------------------

def _actions(reader: Reader, root: etree._Element) -> tuple[ActionConfig, ...]:
    result: list[ActionConfig] = []
    for el in (a for acts in children(root, "Actions") for a in children(acts, "Action")):
        refs: dict[str, list[PluginRef]] = {"On": [], "If": [], "Do": []}
        steps: list[tuple[str, PluginRef]] = []
        ok = True
        for step in children(el, "On", "If", "Do"):
            ref = reader.plugin_ref(step)
            if ref is None or not _check_action_module(reader, step, ref.module):
                ok = False
                continue
            refs[str(step.tag)].append(ref)
            if step.tag != "On":
                steps.append((str(step.tag).lower(), ref))
        if ok and refs["On"] and refs["Do"]:
            result.append(ActionConfig(on=tuple(refs["On"]), if_=tuple(refs["If"]), do=tuple(refs["Do"]),
                                       where=reader.where(el), steps=tuple(steps)))
    return tuple(result)


def _check_action_module(reader: Reader, step: etree._Element, module: str) -> bool:
    """AMPS's built-in action modules must be spelled right and used in their role."""
    if not module.startswith("amps-action-"):
        return True  # a plugin of the user's own
    role = str(step.tag)
    known = ACTION_MODULES[role]
    if module in known:
        return True
    module_el = child(step, "Module")
    for other_role, names in ACTION_MODULES.items():
        if module in names:
            reader.log.error(module_el, f"{module!r} belongs in <{other_role}>, not in <{role}>")
            return False
    close = suggestion(module, list(known))
    hint = f" Did you mean {close!r}?" if close else ""
    reader.log.error(module_el, f"unknown AMPS action module {module!r} in <{role}>.{hint}")
    return False
