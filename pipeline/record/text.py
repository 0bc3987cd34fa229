"""Data as markdown that renders as itself: the escaping every audit record and timeline row goes through.

The record is evidence: every string that comes from data, a config or a stage (feature names,
messages, paths, hosts, waivers) is escaped (`md_text`, `code`) so that it can neither start a line nor
open a section, a table cell, a link or HTML; a hostile key shows as itself. The only HTML in a record
is what the renderer itself writes (`anchor`, `details`), from fixed text and `[a-z0-9-]` ids.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BREAKS = re.compile(r"\r\n|[\n\r\v\f\x85\u2028\u2029]")
_SPECIAL = re.compile(r"([\\`*_<>#|~&]|!(?=\[)|\](?=[(\[:]))")
_BRACKETS = re.compile(r"([\\`*_<>#|~&\[\]]|!(?=\[))")
_LEADING = re.compile(r"^(\s*)(\d+)([.)])|^(\s*)([-+=])")
_SLUG = re.compile(r"[^a-z0-9]+")


def flat(value: Any) -> str:
    """One line of printable text: a line break shows as `\\n`, a control character as `\\xNN`."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = _BREAKS.sub("\\\\n", text)
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)


def md_text(value: Any, limit: int | None = None, brackets: bool = False) -> str:
    """Data as inline markdown that renders as itself: no heading, list, quote, HTML, link or cell.
    `brackets`: escape every `[`/`]` too (text inside a link or image's own brackets)."""
    plain = flat(value)
    if limit is not None and len(plain) > limit:
        plain = plain[: limit - 1] + "…"
    out = (_BRACKETS if brackets else _SPECIAL).sub(r"\\\1", plain)
    return _LEADING.sub(lambda m: f"{m[1] or ''}{m[2] or ''}\\{m[3]}" if m[2] else f"{m[4]}\\{m[5]}", out)


def code(value: Any, table: bool = False, limit: int | None = None) -> str:
    """Data as a code span whose fence is longer than any backtick run inside it (CommonMark)."""
    plain = flat(value)
    if limit is not None and len(plain) > limit:
        plain = plain[: limit - 1] + "…"
    fence = "`" * (max((len(r) for r in re.findall(r"`+", plain)), default=0) + 1)
    pad = " " if plain.startswith("`") or plain.endswith("`") else ""
    span = f"{fence}{pad}{plain}{pad}{fence}"
    return span.replace("|", "\\|") if table else span


def cell(value: Any, limit: int = 140) -> str:
    """A table cell: escaped one-line text, cut at `limit` characters."""
    return "—" if value is None else md_text(value, limit)


def unescape(text: str) -> str:
    """A timeline cell as it was before `md_text` escaped it (the reverse of the backslash escapes)."""
    return re.sub(r"\\(.)", r"\1", text)


def fenced(body: str, lang: str = "json") -> list[str]:
    """A block whose fence is longer than any backtick run in it, so data cannot close it."""
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", body)), default=0) + 1)
    return [f"{fence}{lang}", body, fence]


def anchors(ids: list[str]) -> dict[str, str]:
    """One HTML id per distinct check id, `check-<slug>` of `[a-z0-9-]` only (safe in an attribute and
    in a `#fragment`); ids that slug alike get `-2`, `-3`. The first occurrence of an id owns it."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for check_id in ids:
        if check_id in out:
            continue
        base = "check-" + (_SLUG.sub("-", str(check_id).lower()).strip("-")[:80] or "row")
        slug, n = base, 1
        while slug in used:
            n += 1
            slug = f"{base}-{n}"
        used.add(slug)
        out[check_id] = slug
    return out


def anchor(slug: str) -> str:
    """The inline target a reason links to (`slug` comes from `anchors`: `[a-z0-9-]` only)."""
    assert re.fullmatch(r"[a-z0-9-]+", slug), slug
    return f'<a id="{slug}"></a>'


def details(summary: str, body: list[str]) -> list[str]:
    """A folded block (GitHub, GitLab and most viewers render it collapsed). `summary` is the renderer's
    own text and numbers, never data (inside an HTML block markdown escapes do not apply); the body is
    markdown (the blank lines around it let it render as such, and end the HTML block after it)."""
    assert not re.search(r"[<>&`\\]", summary), summary
    return ["<details>", f"<summary>{summary}</summary>", "", *body, "", "</details>", ""]


ARGV_ITEM_BYTES = 2048  # what a record quotes of one argv item (a JSON --rename_map is well under)
ARGV_TOTAL_BYTES = 16384  # and of the whole command: a record is evidence, not a copy of the input


def quoted_argv(
    argv: list[str], item_bytes: int = ARGV_ITEM_BYTES, total: int = ARGV_TOTAL_BYTES
) -> list[str]:
    """The command as a record quotes it: each item and the whole capped (a 1 MiB argv item once made a
    2 MB record), the cut said in place, `… (N bytes cut)`. The job still runs the argv as typed."""
    quoted: list[str] = []
    used = 0
    for index, item in enumerate(argv):
        raw = item.encode("utf-8", "surrogateescape")
        if used + min(len(raw), item_bytes) > total:
            rest = sum(len(a.encode("utf-8", "surrogateescape")) for a in argv[index:])
            quoted.append(f"… ({len(argv) - index} more item(s), {rest} bytes cut)")
            break
        if len(raw) > item_bytes:
            kept = raw[:item_bytes].decode("utf-8", "ignore")
            item = f"{kept}… ({len(raw) - len(kept.encode('utf-8'))} bytes cut)"
        quoted.append(item)
        used += min(len(raw), item_bytes)
    return quoted
