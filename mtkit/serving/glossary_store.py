"""The server's glossaries: created, listed, read and deleted through DeepL's glossary routes, named by id in any
translate request, and kept in a folder (``mtkit serve --glossary-dir``) as one JSON file each, written atomically
(``files.atomic_write_text``), so they survive a restart. Without a folder they live as long as the server.

A file that does not read as a glossary is refused when the server starts, in one line naming it: a server that
silently dropped a glossary would translate its terms some other way.
"""

from __future__ import annotations

import datetime
import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mtkit.errors import MtkitError
from mtkit.files import atomic_write_text, remove_stale_temps
from mtkit.serving.errors import ApiError
from mtkit.text.glossary import Glossary

MAX_GLOSSARIES = 1000  # per server
_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class GlossaryLimit(MtkitError):
    """The server holds as many glossaries as it may."""


@dataclass(frozen=True)
class Stored:
    """A stored glossary: its id, when it was made (UTC, DeepL's format) and the glossary."""

    id: str
    created: str
    glossary: Glossary

    def info(self) -> dict:
        """DeepL's glossary object."""
        g = self.glossary
        return {
            "glossary_id": self.id,
            "name": g.name,
            "ready": True,
            "source_lang": g.source,
            "target_lang": g.target,
            "creation_time": self.created,
            "entry_count": len(g.entries),
        }

    def dump(self) -> str:
        g = self.glossary
        about = {"name": g.name, "source_lang": g.source, "target_lang": g.target, "creation_time": self.created}
        return json.dumps({"glossary_id": self.id, **about, "entries": [list(e) for e in g.entries]}, indent=1)


class GlossaryStore:
    """Glossaries by id, in ``folder`` (None: in memory only), at most ``most`` of them.

    Raises:
        MtkitError: a folder that cannot be made, or a file in it that is not a glossary (one line naming it).
    """

    def __init__(self, folder: Optional[Path] = None, most: int = MAX_GLOSSARIES):
        self.folder, self.most = (Path(folder) if folder is not None else None), most
        self.glossaries: dict[str, Stored] = {}
        if self.folder is None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise MtkitError(f"--glossary-dir {self.folder}: cannot make it ({err.strerror or err})") from None
        remove_stale_temps(self.folder)
        for path in sorted(self.folder.glob("*.json")):
            stored = _read(path)
            self.glossaries[stored.id] = stored

    def create(self, glossary: Glossary) -> Stored:
        """Store ``glossary`` under a new id (written to the folder before it is answered).

        Raises:
            GlossaryLimit: the server holds ``most`` glossaries already.
            MtkitError: the folder cannot be written.
        """
        if len(self.glossaries) >= self.most:
            raise GlossaryLimit(f"this server holds at most {self.most} glossaries; delete one first")
        now = datetime.datetime.now(datetime.timezone.utc)
        stored = Stored(
            str(uuid.uuid4()), now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z", glossary
        )
        if self.folder is not None:
            atomic_write_text(self.folder / f"{stored.id}.json", stored.dump())
        self.glossaries[stored.id] = stored
        return stored

    def get(self, glossary_id: str) -> Optional[Stored]:
        return self.glossaries.get(glossary_id)

    def delete(self, glossary_id: str) -> bool:
        """Remove a glossary (its file first); False where there is none of that id."""
        if glossary_id not in self.glossaries:
            return False
        if self.folder is not None:
            (self.folder / f"{glossary_id}.json").unlink(missing_ok=True)
        del self.glossaries[glossary_id]
        return True

    def resolve(self, value, source: Optional[str] = None, target: Optional[str] = None) -> Optional[Glossary]:
        """The glossary a request names: a stored glossary's id, or inline entries {source term: target term};
        None for none. ``source``, ``target``: the request's languages where it names them, which a stored
        glossary's pair must be.

        Raises:
            ApiError: 404 for an unknown id; 422 for entries a glossary cannot hold or another type; 400 for a
                glossary of another pair.
        """
        if value is None or value == {}:
            return None
        if isinstance(value, str):
            stored = self.get(value)
            if stored is None:
                raise ApiError(404, f"glossary: no glossary {value!r} on this server (GET /v2/glossaries lists them)")
            g = stored.glossary
            for given, own, what in ((source, g.source, "source"), (target, g.target, "target")):
                if given not in (None, "", "auto") and own and given != own:
                    raise ApiError(400, f"glossary {value}: its {what} language is {own}, not {given}")
            return g
        if isinstance(value, dict):  # inline: each source term once (the first of those that differ in case)
            entries: dict = {}
            for source_term, target_term in value.items():
                if isinstance(source_term, str) and isinstance(target_term, str):
                    entries.setdefault(source_term.strip().casefold(), (source_term.strip(), target_term.strip()))
                else:
                    entries[len(entries)] = (source_term, target_term)  # refused by Glossary
            try:
                return Glossary(tuple(entries.values()))
            except MtkitError as err:
                raise ApiError(422, f"glossary: {err}") from None
        raise ApiError(422, "glossary: a glossary's id, or an object of source term: target term")

    def all(self) -> list[Stored]:
        return sorted(self.glossaries.values(), key=lambda s: (s.created, s.id))


def _read(path: Path) -> Stored:
    """A stored glossary from its file, or one line saying why the file is not one."""

    def damaged(why: str) -> MtkitError:
        return MtkitError(f"{path}: a damaged glossary file ({why}); restore it from a backup or delete it")

    try:
        tree = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise damaged(type(err).__name__ if not isinstance(err, ValueError) else "not valid JSON") from None
    if not isinstance(tree, dict):
        raise damaged("not a JSON object")
    glossary_id = tree.get("glossary_id")
    if glossary_id != path.stem or not _ID.match(str(glossary_id)):
        raise damaged("its glossary_id is not its file's name")
    about = {k: tree.get(k) for k in ("name", "source_lang", "target_lang", "creation_time")}
    if not all(isinstance(v, str) for v in about.values()):
        raise damaged("name, source_lang, target_lang and creation_time must be strings")
    entries = tree.get("entries")
    if not isinstance(entries, list) or not all(isinstance(e, list) and len(e) == 2 for e in entries):
        raise damaged("entries must be a list of [source, target] pairs")
    try:
        glossary = Glossary(
            tuple(tuple(e) for e in entries),
            name=about["name"],
            source=about["source_lang"],
            target=about["target_lang"],
        )
    except MtkitError as err:
        raise damaged(str(err)) from None
    return Stored(glossary_id, about["creation_time"], glossary)
