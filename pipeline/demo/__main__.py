"""`python -m pipeline.demo build [--variant default|faulty] [--out DIR]`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

from pipeline.errors import InputError, PreflightError, one_line


def _variant_cfg(variant: str) -> dict:
    path = Path(__file__).resolve().parents[1] / "conf" / "demo" / f"{variant}.yaml"
    if path.is_file():
        return yaml.safe_load(path.read_text()) or {}
    if variant == "default":
        return {"variant": "default"}
    known = sorted(p.stem for p in path.parent.glob("*.yaml"))
    raise InputError(f"--variant: unknown demo variant {variant!r}; known: {', '.join(known)}", path=path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.demo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="generate the demo model, dataset and training config")
    build.add_argument("--variant", default="default")
    build.add_argument("--out", default=None, help="output directory (default: preflight/demo/<variant>)")
    args = parser.parse_args(argv)
    from pipeline.demo.build import build as run_build

    started = time.time()
    try:
        cfg = _variant_cfg(args.variant)
        out = Path(args.out or Path("preflight") / "demo" / args.variant)
        paths = run_build(cfg, out)
    except PreflightError as exc:
        print(f"demo: {one_line(exc)}", file=sys.stderr)
        return 2
    print(
        json.dumps({"variant": args.variant, **paths, "seconds": round(time.time() - started, 2)}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
