"""The element tables of ``docs/config.md``, generated from :mod:`broker.config.schema`.

``python -m broker.config.reference`` prints them; a test fails when the docs and the schema disagree.
"""

from __future__ import annotations

from broker.config.schema import ROOT, Support, ignored_names, reference_rows

SUPPORTED_BEGIN = "<!-- BEGIN GENERATED: supported elements -->"
SUPPORTED_END = "<!-- END GENERATED: supported elements -->"
IGNORED_BEGIN = "<!-- BEGIN GENERATED: ignored elements -->"
IGNORED_END = "<!-- END GENERATED: ignored elements -->"
_LEGACY = "/AMPSConfig/TopicMetaData/TopicDefinition/"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def supported_table() -> str:
    """Markdown table of every supported element: path, type, default, description."""
    lines = ["| Element | Type | Default | Description |", "|---|---|---|---|"]
    for path, spec in reference_rows(ROOT):
        if spec is ROOT or path.startswith(_LEGACY):
            continue  # the legacy spelling repeats SOW/Topic
        kind = spec.type or ("options" if spec.support is Support.FREEFORM else "elements")
        flags = [f for f, on in (("required", spec.required), ("repeatable", spec.repeatable)) if on]
        if spec.synonym_of:
            flags.append(f"synonym of {spec.synonym_of}")
        kind += f" ({', '.join(flags)})" if flags else ""
        name = path.removeprefix("/AMPSConfig/")
        lines.append(f"| `{name}` | {_cell(kind)} | {_cell(spec.default) or '-'} | {_cell(spec.doc)} |")
    return "\n".join(lines)


def ignored_table() -> str:
    """Markdown table of the AMPS elements accepted with a warning, grouped by parent."""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for path, spec in ignored_names(ROOT):
        if path.startswith("/AMPSConfig/TopicMetaData/"):
            continue  # the legacy spelling repeats SOW
        parent, _, name = path.rpartition("/")
        groups.setdefault(parent.removeprefix("/AMPSConfig").lstrip("/") or "AMPSConfig", []).append(
            (name, spec.support.value, spec.doc))
    lines = ["| In | Elements | Note |", "|---|---|---|"]
    for parent, entries in groups.items():
        by_note: dict[str, list[str]] = {}
        for name, support, note in entries:
            by_note.setdefault(f"{support}: {note}" if note else support, []).append(f"`{name}`")
        for note, names in by_note.items():
            lines.append(f"| `{parent}` | {', '.join(names)} | {_cell(note)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(SUPPORTED_BEGIN, supported_table(), SUPPORTED_END, "", IGNORED_BEGIN, ignored_table(), IGNORED_END,
          sep="\n")
