"""Rendering and writing the pages: Jinja2 templates shipped in the package (`templates/`), autoescape on
for every template, each file written atomically, the index under the audit lock.

Each page carries a Content-Security-Policy that allows its own inline style and script by their
sha256, images from its folder, and nothing else: a value that somehow reached the page as markup could
still not run or fetch anything.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import (
    Environment,
    FileSystemBytecodeCache,
    PackageLoader,
    StrictUndefined,
    TemplateError,
    select_autoescape,
)
from markupsafe import Markup

from pipeline.record import history
from pipeline.record.audit import LOCK
from pipeline.record.html import summaries
from pipeline.record.html.diff import diff
from pipeline.record.html.entries import Entry, entries, previous
from pipeline.record.html.index import row_cells, summary_context
from pipeline.record.html.page import page_context
from pipeline.storage import atomic_write_text, file_lock, user_cache

INDEX = "index.html"


def page_path(markdown: Path) -> Path:
    """The page beside a markdown record: `<stem>.html` (the stem ends in `_audit`)."""
    return Path(markdown).with_suffix(".html")


def page_name(stem: str) -> str:
    return f"{stem}.html"


@functools.cache
def environment() -> Environment:
    """The templates' environment. Compiled templates are kept in the user's cache (`storage.user_cache`,
    `jinja/`), checked against their source: compiling the page's template
    took 0.2 s of every gate. Where no cache folder can be made, each gate compiles them."""
    env = Environment(
        loader=PackageLoader("pipeline.record.html", "templates"),
        bytecode_cache=_bytecode_cache(),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["urlpart"] = lambda value: quote(str(value))
    return env


def _bytecode_cache() -> FileSystemBytecodeCache | None:
    folder = user_cache() / "jinja"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = folder.stat()
    except OSError:
        return None
    # compiled code is loaded from it: only a folder this user owns and no one else can write to
    private = st.st_uid == os.getuid() and not st.st_mode & 0o022
    return FileSystemBytecodeCache(str(folder)) if private and os.access(folder, os.W_OK) else None


def _asset(name: str) -> str:
    env = environment()
    assert env.loader is not None
    return env.loader.get_source(env, name)[0]


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render(template: str, script: str, **context: Any) -> str:
    """A template with the shared style and one script inlined, and the policy that allows only them."""
    style, code = _asset("style.css"), _asset(script)
    policy = (
        "default-src 'none'; img-src 'self' file: data:; "
        f"style-src {_sha(style)}; script-src {_sha(code)}; base-uri 'none'; form-action 'none'"
    )
    return (
        environment()
        .get_template(template)
        .render(style=Markup(style), script=Markup(code), policy=policy, **context)
    )


def render_page(entry: Entry, before: Entry | None, audit_dir: Path) -> str:
    """The record's page; a record this renderer cannot lay out (a twin of a shape it does not know)
    gets a page that says so and where the record is, never a gate that fails after its record."""
    try:
        context = page_context(entry, audit_dir)
        has_diff = before is not None and before.data is not None
        context["diff"] = diff(entry, before, audit_dir) if has_diff else None
        return render("page.html.j2", "page.js", **context)
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
        why = f"{type(exc).__name__}: {exc}"
        return render("broken.html.j2", "none.js", stem=entry.stem, why=why)


def write_html(
    audit_dir: Path, markdown: Path, mode: int | None = None, key: bytes | None = None
) -> list[Path]:
    """The gate's call after its record, under the audit lock (so two gates finishing together each leave
    an index that lists both): this record's page, then the index updated from each record's summary,
    reading only the twins that are new or changed since. Returns the files written."""
    audit_dir = Path(audit_dir)
    written = []
    with file_lock(audit_dir / LOCK):
        twins = history.verify(audit_dir, key)
        found, read = summaries.current(twins, summaries.load(audit_dir), row_cells)
        twin = Path(markdown).with_suffix(".json")
        mine = next((t for t in twins if t.path == twin), None)
        current = read.get(twin.name) or (Entry(mine) if mine is not None else None)
        if current is not None and current.data is not None:
            before = _previous(twins, found, current)
            page = render_page(current, before, audit_dir)
            written.append(atomic_write_text(page_path(markdown), page, mode))
        summaries.save(audit_dir, found, mode)
        text = render("index.html.j2", "index.js", **summary_context(twins, found, audit_dir, page_name))
        written.append(atomic_write_text(audit_dir / INDEX, text, mode))
    return written


def _previous(twins: list[history.Twin], found: dict[str, Any], current: Entry) -> Entry | None:
    """`entries.previous` from the summaries: the newest trusted record before `current` of the same
    lineage, only that twin read (and checked to be the content its verify proved)."""
    lineage, order = list(current.lineage()), current.order()
    earlier = [
        (tuple(found[t.path.name]["order"]), t)
        for t in twins
        if t.problem is None
        and t.record is not None
        and t.path != current.path
        and found[t.path.name].get("lineage") == lineage
        and tuple(found[t.path.name]["order"]) < order
    ]
    for _, twin in sorted(earlier, key=lambda pair: pair[0], reverse=True):
        entry = Entry(twin)
        if entry.trusted:
            return entry
    return None


def write_index(
    audit_dir: Path, mode: int | None = None, key: bytes | None = None, found: list[Entry] | None = None
) -> Path:
    """index.html from every twin, each summarized afresh, listed under the audit lock (or from `found`,
    listed by a caller that holds the lock); the summaries kept for the gates' updates."""
    if found is None:
        with file_lock(Path(audit_dir) / LOCK):
            return write_index(audit_dir, mode, key, entries(audit_dir, key))
    twins = sorted((e.twin for e in found), key=lambda t: t.path.name)
    fresh = {e.path.name: summaries.summarize(e, row_cells) for e in found}
    summaries.save(audit_dir, fresh, mode)
    text = render("index.html.j2", "index.js", **summary_context(twins, fresh, audit_dir, page_name))
    return atomic_write_text(Path(audit_dir) / INDEX, text, mode)


def rebuild_html(audit_dir: Path, mode: int | None = None, key: bytes | None = None) -> tuple[int, Path]:
    """Every record's page rendered again from its twin, then the index (`preflight-status --html`), all
    under the audit lock. Returns how many pages were written and the index's path."""
    audit_dir = Path(audit_dir)
    with file_lock(audit_dir / LOCK):
        found = entries(audit_dir, key)
        lineages: dict[tuple[str, ...], list[Entry]] = {}
        for entry in found:
            if entry.data is not None:
                lineages.setdefault(entry.lineage(), []).append(entry)
        pages = 0
        for same in lineages.values():
            for entry in same:
                page = render_page(entry, previous(same, entry), audit_dir)
                atomic_write_text(audit_dir / page_name(entry.stem), page, mode)
                pages += 1
        return pages, write_index(audit_dir, mode, key, found)
