"""`python -m pipeline.demo build [--variant default|faulty] [--out DIR]`, and
`python -m pipeline.demo image [--out DIR]`: the demo's SIF image (built once, promoted), its path on
stdout; where the tools to build it are missing, one line saying so on stderr and exit 3."""

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
    image = sub.add_parser("image", help="build the demo's SIF image once and promote it; print its path")
    image.add_argument("--out", default=str(Path("preflight") / "demo" / "image"), help="its folder")
    args = parser.parse_args(argv)
    if args.command == "image":
        return _image(Path(args.out))
    started = time.time()
    try:
        cfg = _variant_cfg(args.variant)  # a typo is answered before the build's torch and MuJoCo load
        from pipeline.demo.build import build as run_build

        out = Path(args.out or Path("preflight") / "demo" / args.variant)
        paths = run_build(cfg, out)
    except PreflightError as exc:
        print(f"demo: {one_line(exc)}", file=sys.stderr)
        return 2
    print(
        json.dumps({"variant": args.variant, **paths, "seconds": round(time.time() - started, 2)}, indent=2)
    )
    return 0


def _image(folder: Path) -> int:
    from pipeline.demo.image import ensure

    try:
        print(ensure(folder).resolve())
    except InputError as exc:
        print(f"demo: runs without an image: {one_line(exc)}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
