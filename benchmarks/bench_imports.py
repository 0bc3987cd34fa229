"""What a launch and a job pay in imports before they do anything, against the libraries they stand on.

In one run, each in a fresh interpreter, best of `--runs` (interleaved, so a loaded machine slows all
alike):
  1. `import pipeline.launch` against `import hydra, submitit, rich, omegaconf` (the baseline: a launch
     cannot import less than its own framework);
  2. a contract job's imports: its entry module (`pipeline.run.jobs`), the registry, and the contract
     stage's functions, as `jobs._prepare` resolves them, against the same baseline.
Each child times its own import (wall and CPU time, interpreter start-up excluded; on a loaded machine
the CPU-time ratio is the steadier one) and names the heavy libraries and the stage modules it ended
with. Bytecode is compiled once in a warm-up, into a scratch folder (the environment may forbid writing
it), so each import reads it as on a user's machine. `--root` points the children at another checkout;
`--against` measures a second one alike, interleaved (e.g. main: before and after). One JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HEAVY = ("matplotlib", "scipy", "torch", "mujoco", "av", "jinja2", "h5py", "pyarrow", "numpy", "PIL")
BASELINE = "import hydra, submitit, rich, omegaconf"
LAUNCH = "import pipeline.launch"
# what a job process imports before its stage runs (`jobs._prepare`), in this checkout's API or main's
JOB = """
import pipeline.run.jobs
from pipeline import stages
if hasattr(stages, "import_plugins"):
    stages.import_plugins(())
else:
    stages.load(())
stage = stages.get("contract")
for fn in (stage.run, stage.run_part):
    getattr(fn, "resolve", lambda: fn)()
"""
CHILD = """
import json, sys, time
started, cpu = time.perf_counter(), time.process_time()
exec(compile({code!r}, "<bench>", "exec"))
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
heavy = [m for m in {heavy!r} if m in sys.modules]
ours = [m for m in sys.modules if m.startswith("pipeline.stages.")]
stage_modules = sorted({{".".join(m.split(".")[:3]) for m in ours}})
print(json.dumps({{"seconds": seconds, "cpu": cpu, "heavy": heavy, "stage_modules": stage_modules}}))
"""


def child(code: str, root: Path, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(root), PYTHONPYCACHEPREFIX=str(cache))  # compiled once, as on a user's disk
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(code=code, heavy=HEAVY)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({code.strip().splitlines()[0]}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(roots: list[Path], runs: int) -> list[dict]:
    """Best of `runs` per checkout and import, every checkout's children interleaved in each round."""
    best: list[dict[str, dict]] = [{} for _ in roots]
    codes = (("baseline", BASELINE), ("launch", LAUNCH), ("job_contract", JOB))
    with tempfile.TemporaryDirectory() as scratch:
        caches = [Path(scratch) / str(i) for i in range(len(roots))]
        for root, cache in zip(roots, caches, strict=True):  # the warm-up writes the bytecode, in `cache`
            for _, code in codes:
                child(code, root, cache)
        for _ in range(runs):
            for root, cache, found in zip(roots, caches, best, strict=True):
                for name, code in codes:
                    got = child(code, root, cache)
                    if name not in found or got["seconds"] < found[name]["seconds"]:
                        found[name] = {**got, "cpu": min(got["cpu"], found.get(name, got)["cpu"])}
                    else:
                        found[name]["cpu"] = min(got["cpu"], found[name]["cpu"])
    return [summary(root, found) for root, found in zip(roots, best, strict=True)]


def summary(root: Path, best: dict[str, dict]) -> dict:
    base, base_cpu = best["baseline"]["seconds"], best["baseline"]["cpu"]
    return {
        "root": str(root),
        "baseline_s": round(base, 3),
        "launch_s": round(best["launch"]["seconds"], 3),
        "launch_ratio": round(best["launch"]["seconds"] / base, 2),
        "launch_cpu_ratio": round(best["launch"]["cpu"] / base_cpu, 2),
        "launch_heavy": best["launch"]["heavy"],
        "launch_stage_modules": best["launch"]["stage_modules"],
        "job_contract_s": round(best["job_contract"]["seconds"], 3),
        "job_contract_ratio": round(best["job_contract"]["seconds"] / base, 2),
        "job_contract_cpu_ratio": round(best["job_contract"]["cpu"] / base_cpu, 2),
        "job_contract_heavy": best["job_contract"]["heavy"],
        "job_contract_stage_modules": best["job_contract"]["stage_modules"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh interpreters per import (best of)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--against", type=Path, default=None, help="another checkout measured alike")
    args = parser.parse_args()
    roots = [args.root.resolve(), *([args.against.resolve()] if args.against else [])]
    found = measure(roots, args.runs)
    out = {"runs": args.runs, "python": sys.version.split()[0], **found[0]}
    if args.against is not None:
        out["against"] = found[1]
        out["launch_speedup"] = round(found[1]["launch_s"] / found[0]["launch_s"], 2)
        out["job_contract_speedup"] = round(found[1]["job_contract_s"] / found[0]["job_contract_s"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
