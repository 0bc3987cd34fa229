"""`python -m pipeline.storage status|promote|prune PRIMARY [--fallback DIR ...]`.

status   where every checkpoint of PRIMARY is (primary or which fallback), its size, state and whether
         its sha256 still matches; exit 1 when one is damaged
promote  move fallback checkpoints back to PRIMARY where it has room again (atomic, verified)
prune    keep the newest --keep K; delete only what the manifest marks superseded, and temp files
         that killed saves left (ours only, untouched for --stale-hours)

promote and prune act only in PRIMARY, the --fallback folders and the fallbacks PRIMARY's own manifest
records; a copied or moved folder is re-rooted (said so); a location elsewhere or a file that no longer
matches its manifest line refuses the command with nothing touched (exit 3). --dry-run lists the plan.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pipeline.errors import PreflightError, one_line
from pipeline.storage.maintain import (
    Refused,
    apply_retention,
    plan_retention,
    promote,
    scope_of,
    stale_temps,
    status_rows,
)


def _table(title: str, rows: list[dict], columns: list[str]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(row.get(c, "")) for c in columns))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.storage",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=("status", "promote", "prune"))
    parser.add_argument("primary", type=Path, help="the primary checkpoint folder")
    parser.add_argument(
        "--fallback",
        action="append",
        default=[],
        type=Path,
        help="a fallback folder not yet named in the primary's manifest (repeatable)",
    )
    parser.add_argument("--keep", type=int, default=None, help="prune: how many newest checkpoints to keep")
    parser.add_argument("--stale-hours", type=float, default=6.0, help="prune: age of a leftover temp file")
    parser.add_argument("--no-verify", action="store_true", help="status: skip the sha256 check")
    parser.add_argument("--dry-run", action="store_true", help="promote/prune: list what would be done")
    args = parser.parse_args(argv)
    console = Console()
    try:
        if args.command != "status":
            note = scope_of(args.primary, args.fallback).note()
            if note:
                console.print(note, soft_wrap=True)
        if args.command == "status":
            rows = status_rows(args.primary, args.fallback, verify=not args.no_verify)
            columns = ["name", "where", "location", "size", "state", "saved"]
            console.print(_table(f"checkpoints of {args.primary.resolve()}", rows, columns))
            return 1 if any("BAD" in r["state"] for r in rows) else 0
        if args.command == "promote":
            rows = promote(args.primary, args.fallback, dry_run=args.dry_run)
            console.print(_table("promote", rows, ["name", "from", "to", "moved", "reason"]))
            return 0
        if args.keep is None:
            parser.error("prune needs --keep K")
        temps = stale_temps(args.primary, args.stale_hours * 3600, args.fallback)
        if args.dry_run:
            for line in plan_retention(args.primary, args.keep, args.fallback).lines():
                console.print(line, soft_wrap=True)
            for path in temps:
                console.print(f"would remove temp file: {path}", soft_wrap=True)
            return 0
        deleted = apply_retention(args.primary, args.keep, args.fallback)
        console.print(f"deleted {len(deleted)} superseded checkpoint(s): {', '.join(deleted) or '-'}")
        for path in temps:
            path.unlink(missing_ok=True)
        console.print(f"removed {len(temps)} temp file(s) left by killed saves")
        return 0
    except Refused as exc:
        for line in str(exc).splitlines():
            console.print(line, soft_wrap=True, markup=False)
        return 3
    except PreflightError as exc:
        console.print(f"error: {one_line(exc)}", soft_wrap=True, markup=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())
