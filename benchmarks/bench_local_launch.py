"""A minimal local launch's wall time, as every user (and every launching test) pays it.

Each run is `python -m pipeline.launch stage=<stage> launcher=local wait=true` in a fresh folder whose
`preflight/demo` holds a copy of an already built embedded demo (as a second launch in the same folder
finds it, and as the test suite seeds it), so the demo's build is not what is timed: the launcher's
imports, the demo provider, planning, the jobs (their process starts and imports), and the gate are.
`--root` is the checkout measured; `--against` a second one (e.g. main before a change), run
interleaved with it (a loaded machine slows both alike); the median of `--runs` for each, wall and the
CPU time of the launch and its children (after one untimed launch of each, so that neither pays for
compiling its bytecode). One JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def prepared_demo(scratch: Path, root: Path) -> Path:
    """An output root whose demo is built (once, by a launch of `root` that builds it)."""
    out = scratch / "seed" / "preflight"
    if not (out / "demo").is_dir():
        _launch(root, scratch / "seed", ["stage=full", "dry_run=true"])
    return out / "demo"


def _launch(root: Path, cwd: Path, overrides: list[str]) -> tuple[float, float, int]:
    cwd.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(root)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.launch", "launcher=local", "wait=true", *overrides],
        cwd=cwd, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 3):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    return wall, cpu, proc.returncode


def one(root: Path, demo: Path, scratch: Path, stage: str, extra: list[str]) -> tuple[float, float, int]:
    cwd = Path(tempfile.mkdtemp(dir=scratch))
    shutil.copytree(demo, cwd / "preflight" / "demo")
    try:
        return _launch(root, cwd, [f"stage={stage}", *extra])
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--against", type=Path, default=None, help="a second checkout, run interleaved")
    parser.add_argument("--stage", action="append", default=None, help="contract (default), full, ...")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--demo", type=Path, default=None, help="a built `preflight/demo` folder to copy")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed launch of each")
    parser.add_argument("extra", nargs="*", help="more overrides for every launch")
    args = parser.parse_args()
    roots = {"root": args.root.resolve()}
    if args.against:
        roots["against"] = args.against.resolve()
    out: dict[str, object] = {"roots": {k: str(v) for k, v in roots.items()}, "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        scratch = Path(tmp)
        demo = args.demo or prepared_demo(scratch, roots["root"])
        for stage in args.stage or ["contract"]:
            for root in roots.values() if not args.no_warmup else ():  # untimed: bytecode compiled
                one(root, demo, scratch, stage, args.extra)
            times: dict[str, list[tuple[float, float, int]]] = {k: [] for k in roots}
            for _ in range(args.runs):
                for name, root in roots.items():
                    times[name].append(one(root, demo, scratch, stage, args.extra))
                    print(f"{stage} {name}: {times[name][-1]}", file=sys.stderr, flush=True)
            out[stage] = {
                name: {
                    "wall_s": round(statistics.median(t[0] for t in runs), 2),
                    "cpu_s": round(statistics.median(t[1] for t in runs), 2),
                    "codes": sorted({t[2] for t in runs}),
                }
                for name, runs in times.items()
            }
            if "against" in roots:
                walls = {k: v["wall_s"] for k, v in out[stage].items()}  # type: ignore[union-attr]
                out[stage]["wall_ratio"] = round(walls["root"] / walls["against"], 3)  # type: ignore[index]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
