"""``<SOW><Topic>`` (and legacy ``<TopicMetaData><TopicDefinition>``) into :class:`SowTopicConfig`."""

from __future__ import annotations

from collections.abc import Callable

from lxml import etree

from broker.config.elements import Reader, child, children, text_of
from broker.config.model import DEFAULT_RECORD_CACHE_BYTES, HistoryConfig, PluginRef, SowTopicConfig, Where
from broker.config.schema import suggestion
from broker.config.units import parse_interval

MessageTypeCheck = Callable[[etree._Element | None], str | None]
ModuleResolver = Callable[[PluginRef], PluginRef | None]

_DURABILITIES = ("persistent", "transient")


def topic_elements(root: etree._Element) -> list[etree._Element]:
    """Every SOW topic element, in file order of their containers."""
    return ([t for s in children(root, "SOW") for t in children(s, "Topic")]
            + [t for s in children(root, "TopicMetaData") for t in children(s, "TopicDefinition")])


def build_sow_topics(reader: Reader, root: etree._Element, message_type: MessageTypeCheck,
                     resolve: ModuleResolver) -> tuple[SowTopicConfig, ...]:
    """Build every SOW topic and check names and file names are unique."""
    result: list[SowTopicConfig] = []
    names: dict[str, Where] = {}
    files: dict[str, tuple[str, Where]] = {}
    for el in topic_elements(root):
        topic = _topic(reader, el, message_type, resolve)
        name_el = child(el, "Name", "Topic")
        name = text_of(name_el) if name_el is not None else ""
        if name and name in names:
            reader.log.error(name_el, f"SOW topic {name!r} is already defined at {names[name].file}:"
                             f"{names[name].line}; each SOW topic needs its own Name")
            continue
        if name:
            names[name] = reader.where(el)
        if topic is None:
            continue
        if topic.file_name is not None:
            if topic.file_name in files:
                other, where = files[topic.file_name]
                reader.log.error(child(el, "FileName"), f"FileName {topic.file_name!r} is also used by SOW "
                                 f"topic {other!r} ({where.file}:{where.line}); each topic needs its own "
                                 "file (use %n for the topic name)")
                continue
            files[topic.file_name] = (topic.name, topic.where)
        result.append(topic)
    return tuple(result)


def _topic(reader: Reader, el: etree._Element, message_type: MessageTypeCheck,
           resolve: ModuleResolver) -> SowTopicConfig | None:
    log = reader.log
    ok = True
    name = reader.text(el, "Name", "Topic")
    type_el = child(el, "MessageType")
    mtype = message_type(type_el)
    ok = name is not None and mtype is not None

    keys: list[str] = []
    for key_el in children(el, "Key"):
        key = text_of(key_el)
        if not key.startswith("/"):
            log.error(key_el, f"Key {key!r} is not a field path: write it like /id or /order/id")
            ok = False
        keys.append(key)
    key_domain = reader.text(el, "KeyDomain")
    if child(el, "KeyDomain") is not None and not keys:
        log.error(child(el, "KeyDomain"), "KeyDomain needs <Key> fields: add <Key> or remove <KeyDomain>")
        ok = False
    if mtype == "binary" and keys:
        log.error(children(el, "Key")[0], "a binary topic cannot compute SOW keys from <Key> fields (binary "
                  "messages have no fields): remove <Key>; publishers then send the SowKey")
        ok = False

    key_generator = None
    generator_el = child(el, "KeyGenerator")
    if generator_el is not None:
        ref = reader.plugin_ref(generator_el)
        key_generator = resolve(ref) if ref is not None else None
        ok = ok and key_generator is not None

    storage = None
    storage_el = child(el, "Storage")
    if storage_el is not None:
        ref = reader.plugin_ref(storage_el)
        storage = resolve(ref) if ref is not None else None
        ok = ok and storage is not None

    durability = _durability(reader, el)
    file_name = reader.text(el, "FileName")
    file_el = child(el, "FileName")
    if durability == "transient" and file_name is not None and storage_el is None:
        log.warn(file_el, "a transient topic is kept in memory; its <FileName> is not used")
        file_name = None
    elif durability == "persistent" and file_el is None and storage_el is None:
        label = f"SOW topic {name!r}" if name else "the SOW topic"
        log.error(el, f"{label} has neither <FileName> nor <Durability>transient"
                      "</Durability>: add <FileName>./sow/%n.sow</FileName> to store it on disk, or make "
                      "it transient (or choose a storage engine with <Storage>)")
        ok = False
    if file_name is not None and name is not None:
        file_name = file_name.replace("%n", name)

    expiration = _expiration(reader, el)
    history = _history(reader, child(el, "History"))
    if history is not None and expiration not in (None, "bad"):
        log.error(child(el, "Expiration"), "a topic with <History> cannot expire messages: set "
                  "<Expiration>disabled</Expiration> or remove <History>")
        ok = False
    cache_bytes = reader.size(el, "RecordCacheMemoryLimit", default=DEFAULT_RECORD_CACHE_BYTES)
    if not ok or durability is None or expiration == "bad" or history == "bad" or cache_bytes is None:
        return None
    assert name is not None and mtype is not None and not isinstance(expiration, str)
    assert not isinstance(history, str)
    return SowTopicConfig(name=name, message_type=mtype, keys=tuple(keys), key_domain=key_domain,
                          key_generator=key_generator, storage=storage, file_name=file_name, durability=durability,
                          expiration=expiration, history=history, record_cache_bytes=cache_bytes,
                          where=reader.where(el))


def _durability(reader: Reader, el: etree._Element) -> str | None:
    durability_el = child(el, "Durability", "Duration")
    if durability_el is None:
        return "persistent"
    value = text_of(durability_el).lower()
    if value in _DURABILITIES:
        return value
    close = suggestion(value, list(_DURABILITIES))
    hint = f" Did you mean {close!r}?" if close else ""
    reader.log.error(durability_el, f"Durability {text_of(durability_el)!r} is not persistent or "
                     f"transient.{hint}")
    return None


def _expiration(reader: Reader, el: etree._Element) -> float | None | str:
    """Seconds; ``0.0`` for ``enabled``; ``None`` for disabled or absent; ``"bad"`` after an error."""
    expiration_el = child(el, "Expiration")
    if expiration_el is None:
        return None
    text = text_of(expiration_el)
    if text.lower() == "disabled":
        return None
    if text.lower() == "enabled":
        return 0.0
    try:
        seconds = parse_interval(text)
    except ValueError as exc:
        reader.log.error(expiration_el, f"{exc}; or write enabled or disabled")
        return "bad"
    if seconds <= 0:
        reader.log.error(expiration_el, "an expiration time must be greater than 0 (or write disabled)")
        return "bad"
    return seconds


def _history(reader: Reader, el: etree._Element | None) -> HistoryConfig | None | str:
    if el is None:
        return None
    window = reader.interval(el, "Window")
    granularity = reader.interval(el, "Granularity", default=0.0)
    if child(el, "Window") is None or window is None or granularity is None:
        return "bad"  # missing Window was reported by the schema check
    if window <= 0:
        reader.log.error(child(el, "Window"), "the history Window must be greater than 0")
        return "bad"
    return HistoryConfig(window=window, granularity=granularity)
