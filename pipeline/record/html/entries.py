"""The history as the pages read it: each JSON twin, what it holds as plain JSON, and whether it can be
trusted (`pipeline.record.history.verify`: digest, chain, HMAC with the team's key).

A twin that cannot be trusted is still shown (the index marks it, its page says why), never used as
the "previous record" a diff compares against: a forged clear run must not explain today's block.
"""

from __future__ import annotations

import shlex
from functools import cached_property
from pathlib import Path
from typing import Any

from pipeline.record import history, integrity


class Entry:
    """One `*_audit.json` of the history."""

    def __init__(self, twin: history.Twin) -> None:
        self.twin = twin
        self.path = twin.path
        self.problem = twin.problem

    @property
    def stem(self) -> str:
        return self.path.stem

    @cached_property
    def _raw(self) -> dict[str, Any] | None:
        """The twin's JSON as written (bounded); for a twin that proved itself, checked to be the content
        `verify` proved (its digest again), else the entry is not trusted (it changed since)."""
        try:
            raw = integrity.load_json(self.path, history.MAX_TWIN_BYTES, inside=self.path.parent)
        except integrity.Unreadable as exc:
            self.problem = self.problem or f"unreadable: {exc}"
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("sources"), dict):
            return None
        block = raw.pop(history.INTEGRITY, None)
        if self.problem is None and self.twin.record is not None:
            previous = block.get("previous") if isinstance(block, dict) else None
            if integrity.digest({**raw, "previous": previous}) != self.twin.digest:
                self.problem = "changed since the history verified it"
        return raw

    @cached_property
    def data(self) -> dict[str, Any] | None:
        """The record as its twin holds it (JSON); for a twin that did not prove itself, what its file
        says all the same (shown as untrusted, never relied on)."""
        raw = self._raw
        return None if raw is None else {k: v for k, v in raw.items() if k != history.FILES}

    @property
    def files(self) -> dict[str, str]:
        """Artifact path -> its copy beside the record, relative to the audit folder."""
        found = (self._raw or {}).get(history.FILES)
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    @property
    def trusted(self) -> bool:
        self._raw  # noqa: B018  (reading the file may find it changed since it was verified)
        return self.problem is None and self.twin.record is not None

    def order(self) -> tuple[str, str]:
        data = self.data or {}
        return (str(data.get("created") or ""), str(data.get("run_id") or ""))

    def source_name(self, key: str) -> str:
        source = ((self.data or {}).get("sources") or {}).get(key)
        return str(source.get("name") or "") if isinstance(source, dict) else ""

    def command(self) -> str:
        """The training command after `--` as typed (shell-quoted), or "" where there was none."""
        training = ((self.data or {}).get("sources") or {}).get("training")
        argv = training.get("command") if isinstance(training, dict) else None
        if not isinstance(argv, list) or not argv:
            return ""
        return shlex.join(str(a) for a in argv)

    def lineage(self) -> tuple[str, ...]:
        """What makes two records the same thing judged twice: the training command where there is one,
        else the model and the dataset."""
        command = self.command()
        return (
            ("command", command)
            if command
            else ("inputs", self.source_name("model"), self.source_name("dataset"))
        )


def entries(audit_dir: Path, key: bytes | None = None) -> list[Entry]:
    """Every twin of `audit_dir`, oldest first (unreadable ones last, by name)."""
    found = [Entry(t) for t in history.verify(audit_dir, key)]
    return sorted(found, key=lambda e: (e.data is None, e.order(), e.path.name))


def previous(all_entries: list[Entry], current: Entry) -> Entry | None:
    """The newest trusted record before `current` of the same training command, or model + dataset."""
    if current.data is None:
        return None
    lineage, order = current.lineage(), current.order()
    earlier = [
        e
        for e in all_entries
        if e.trusted and e.path != current.path and e.order() < order and e.lineage() == lineage
    ]
    return max(earlier, key=lambda e: e.order()) if earlier else None
