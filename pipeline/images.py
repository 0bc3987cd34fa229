"""The image command line: list and inspect a SIF image, write its promotion record.

    python -m pipeline.images list IMAGE            # the objects, as `siftool list` shows them
    python -m pipeline.images inspect IMAGE         # header, objects, labels, digests (JSON)
    python -m pipeline.images promote IMAGE --who "Ada <ada@lab>" --out images/promoted.yaml

Its own module (not `readers/sif.py`'s `__main__`), so the readers import no command line and the
reader of the format and the reader of promotion records do not import each other.
"""

from __future__ import annotations

import argparse
import json
import sys

from pipeline.errors import PreflightError
from pipeline.readers.promotion import inspect, promotion_record, write_promotion
from pipeline.readers.sif import listing, read_sif


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.images", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="objects as siftool lists them").add_argument("image")
    sub.add_parser("inspect", help="header, objects, labels, digests as JSON").add_argument("image")
    promote = sub.add_parser("promote", help="write a promotion record for an image")
    promote.add_argument("image")
    promote.add_argument("--who", required=True, help="who promotes it (name <email>)")
    promote.add_argument("--out", required=True, help="record file (.yaml/.yml or .json)")
    promote.add_argument("--date", default=None, help="default: now (UTC, ISO 8601)")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            print(f"{'ID':<5}|{'GROUP':<8}|{'LINK':<8}|{'SIF POSITION (start-end)':<26}|TYPE")
            for oid, group, link, span, kind in listing(read_sif(args.image)):
                print(f"{oid:<5}|{group:<8}|{link:<8}|{span:<26}|{kind}")
        elif args.command == "inspect":
            print(json.dumps(inspect(args.image), indent=2))
        else:
            path = write_promotion(promotion_record(args.image, args.who, args.date), args.out)
            print(f"promotion record: {path}")
    except (PreflightError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
