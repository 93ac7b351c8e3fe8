"""XLIFF (``.xliff``, ``.xlf``) 1.0 to 1.2 and 2.x, read and written with lxml.

Translated: the ``source`` of each translation unit (1.x: ``trans-unit``; 2.x: each ``segment`` of a
``unit``) into its ``target``, created right after the source where it is missing or filled where it is
empty. A new translation is marked as machine translated and not yet reviewed: in 1.x the target gets
``state="translated"`` and ``state-qualifier="mt-suggestion"``, in 2.x the segment gets ``state="translated"``.
Units that already have a target with text are kept as they are, and so are units with ``translate="no"`` (on
the unit or on a group or file around it).

Inline codes are carried across: an element around text (1.x ``g`` and ``mrk``, 2.x ``pc`` and ``mrk``) goes
around the target words aligned to the source words it enclosed, its content translated; every other inline
code (1.x ``x``, ``bx``, ``ex``, ``ph``, ``bpt``, ``ept``, ``it``; 2.x ``ph``, ``sc``, ``ec``, ``sm``, ``em``,
``cp``; a protected ``mrk``) is copied whole, ids and native code included, and placed by alignment. A document
without inline codes goes to the model as plain text (``"text"``, which every engine translates).

Kept as they are: everything else, ids, attributes, notes, alternative translations, comments, processing
instructions, the document type, the XML declaration and encoding, and the layout (a new target takes the
source's indentation). Not done: a 1.2 ``seg-source`` (sub-segments marked with ``mrk mtype="seg"``) is not
mirrored in the target, which holds the translation of the whole ``source``; the file's ``target-language`` is
not set.
"""

from __future__ import annotations

import html
import re
from copy import deepcopy

from mtkit.documents.formats import Translate
from mtkit.documents.fragments import library, respaced, translate_fragments
from mtkit.errors import MtkitError
from mtkit.text import markup

V2 = "urn:oasis:names:tc:xliff:document:2.0"
_PAIRED = {"g", "mrk", "pc"}  # inline elements whose content is text to translate


def translate_document(data: bytes, translate: Translate) -> bytes:
    """Translate the units of an XLIFF document that have no translation yet.

    Args:
        data: the document's bytes (any encoding its XML declaration names).
        translate: the model (``formats.Translate``), called once with every source to translate.

    Returns:
        The document with the new targets, in its own encoding.

    Raises:
        MtkitError: bytes that are not well-formed XML, or XML whose root is not ``xliff``; lxml not installed.
    """
    etree = library("lxml.etree", "XLIFF", "lxml")
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as err:
        raise MtkitError(f"not a valid XLIFF file ({err}); fix the XML first (xmllint shows where)") from None
    ns, name = _split(root.tag)
    if name != "xliff":
        raise MtkitError(f"not a valid XLIFF file (its root element is <{name}>, not <xliff>)")
    v2 = ns == V2 or root.get("version", "").startswith("2")

    def q(name: str) -> str:
        return f"{{{ns}}}{name}" if ns else name

    found = []  # (source, target or None, the segment that takes the state in 2.x or None)
    if v2:
        for unit in root.iter(q("unit")):
            if not _translatable(unit):
                continue
            for segment in unit.iter(q("segment")):
                found.append((segment.find(q("source")), segment.find(q("target")), segment))
    else:
        for unit in root.iter(q("trans-unit")):
            if _translatable(unit):
                found.append((unit.find(q("source")), unit.find(q("target")), None))
    wanted = []
    for source, target, state in found:
        if source is None or not "".join(source.itertext()).strip():
            continue
        if target is not None and ("".join(target.itertext()).strip() or len(target)):
            continue
        originals: list = []
        spacing: dict[int, tuple[str, str]] = {}
        fragment = _fragment(source, originals, spacing)
        wanted.append((source, target, state, fragment, originals, spacing))
    if not wanted:
        return data
    translations = translate_fragments([w[3] for w in wanted], translate)
    for (source, target, state, _, originals, spacing), translated in zip(wanted, translations):
        if target is None:
            target = source.makeelement(q("target"), {})
            after = source
            following = source.getnext()
            if following is not None and isinstance(following.tag, str) and _split(following.tag)[1] == "seg-source":
                after = following
            previous = after.getprevious()
            lead = previous.tail if previous is not None else after.getparent().text
            after.addnext(target)
            target.tail = after.tail  # what follows keeps its indentation, and the target gets the source's
            if lead is not None and not lead.strip():
                after.tail = lead
        else:
            for child in list(target):
                target.remove(child)
            target.text = None
        _fill(target, markup.parse(translated).children, originals, spacing)
        if state is None:
            target.set("state", "translated")
            target.set("state-qualifier", "mt-suggestion")
        else:
            state.set("state", "translated")
    return _serialized(etree, root, data)


def _split(tag: str) -> tuple[str, str]:
    """(namespace, local name) of an element's tag (``{namespace}name``)."""
    namespace, _, name = tag[1:].rpartition("}") if tag.startswith("{") else ("", "", tag)
    return namespace, name


def _translatable(unit) -> bool:
    """Whether ``unit`` is to be translated: the ``translate`` of the nearest element around it that has one."""
    for element in (unit, *unit.iterancestors()):
        value = element.get("translate")
        if value is not None:
            return value != "no"
    return True


# ------------------------------------------------------------------------------------- source -> fragment
def _fragment(element, originals: list, spacing: dict[int, tuple[str, str]]) -> str:
    """The HTML fragment of an element's content: text escaped, inline codes as ``data-x`` elements (spans
    around text, markers for the rest) numbered into ``originals``; ``spacing``: the whitespace around each
    marker."""
    parts = [html.escape(element.text or "", quote=False)]
    children = list(element)
    for k, child in enumerate(children):
        if not isinstance(child.tag, str):  # a comment or processing instruction: kept as a marker
            name = ""
        else:
            name = _split(child.tag)[1]
        originals.append(child)
        index = len(originals) - 1
        if name in _PAIRED and not _protected(child):
            parts.append(f'<span data-x="{index}">{_fragment(child, originals, spacing)}</span>')
        else:
            previous = children[k - 1].tail if k else element.text
            before, after = previous or "", child.tail or ""
            spacing[index] = (before[len(before.rstrip()) :], after[: len(after) - len(after.lstrip())])
            parts.append(f'<img data-x="{index}">')
        parts.append(html.escape(child.tail or "", quote=False))
    return "".join(parts)


def _protected(element) -> bool:
    return element.get("mtype") == "protected" or element.get("translate") == "no"


# ------------------------------------------------------------------------------------- fragment -> target
def _fill(target, nodes: list, originals: list, spacing: dict[int, tuple[str, str]]) -> None:
    """Append to ``target`` the XML of translated fragment nodes: text, and the inline codes they stand for."""
    items = []
    elements = []
    for node in nodes:
        if isinstance(node, markup.Text):
            items.append((node.text, None, True))
            elements.append(None)
            continue
        if isinstance(node, markup.Raw):
            continue
        index = node.attrs.get("data-x", "")
        original = originals[int(index)] if index.isdigit() and int(index) < len(originals) else None
        if original is None:  # not one of the source's codes: its text only
            items.append(("".join(_plain(node)), None, True))
            elements.append(None)
        elif int(index) in spacing:
            copied = deepcopy(original)
            copied.tail = None
            items.append(("\0", spacing[int(index)], False))
            elements.append(copied)
        else:
            copied = original.makeelement(original.tag, original.attrib)
            _fill(copied, node.children, originals, spacing)
            items.append(("\0", None, False))
            elements.append(copied)
    for text, element in zip(respaced(items), elements):
        if element is None:
            _append_text(target, text)
            continue
        before, after = text.split("\0", 1)
        _append_text(target, before)
        target.append(element)
        _append_text(target, after)


def _plain(node) -> list[str]:
    if isinstance(node, markup.Text):
        return [node.text]
    if isinstance(node, markup.Element):
        return [text for child in node.children for text in _plain(child)]
    return []


def _append_text(element, text: str) -> None:
    if not text:
        return
    if len(element):
        last = element[-1]
        last.tail = (last.tail or "") + text
    else:
        element.text = (element.text or "") + text


def _serialized(etree, root, data: bytes) -> bytes:
    """The document's bytes: what the source had before and after its root element (XML declaration,
    byte-order mark, document type, comments, line breaks) as written, the root element from the tree."""
    tree = root.getroottree()
    encoding = tree.docinfo.encoding or "UTF-8"
    name = (f"{root.prefix}:xliff" if root.prefix else "xliff").encode("ascii")
    start = re.search(b"<" + re.escape(name) + rb"[\s>/]", data)
    end = data.rfind(b"</" + name)
    close = data.find(b">", end) if end >= 0 else -1
    if start is None or end < start.start() or close < 0:  # not ASCII-compatible (UTF-16): lxml writes it all
        return etree.tostring(tree, encoding=encoding, xml_declaration=True)
    body = etree.tostring(root, encoding=encoding, xml_declaration=False)
    return data[: start.start()] + body + data[close + 1 :]
