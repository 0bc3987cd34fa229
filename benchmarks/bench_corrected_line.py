"""What proving the corrected training line costs the contract job, against judging the line as typed.

    python benchmarks/bench_corrected_line.py --demo <folder of a built demo=faulty: model/, dataset/>
        [--repeat 3]

Alternates, `--repeat` times in this process, on the faulty demo in its one-line form (its base and
dataset folders, `--policy.normalization_mapping` overriding the base's QUANTILES):

- typed:     the contract's judgement of the line as typed: B composed, the data pass (`load_sources`),
             `reconcile`, the remedies;
- corrected: what the corrected line adds: B composed from the corrected argv and `reconcile` again
             on the same data facts (`corrected.corrected_row`; no second data pass).

Prints one JSON line: the best round of each and their ratio (corrected / typed).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

from pipeline.cli.training_command import fill
from pipeline.stages.contract import load_sources, reconcile, remedies
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.contract.corrected import corrected_row

MODES = '{"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ENV": "QUANTILES", "ACTION": "MEAN_STD"}'


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--demo", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="bench-corrected-"))
    argv = [
        "lerobot-train",
        f"--policy.path={args.demo / 'model'}",
        "--dataset.repo_id=local/demo_cube_single",
        f"--dataset.root={args.demo / 'dataset'}",
        f"--policy.normalization_mapping={MODES}",
    ]
    sections = {"model": {}, "dataset": {}, "training": {"command": argv}}
    cfg = OmegaConf.create({"output_root": str(out), **sections})
    fill(cfg)
    config = ContractConfig()
    typed, fixed, said = [], [], {}
    for _ in range(args.repeat):
        start = time.perf_counter()
        a, b, c, _ = load_sources(cfg, config)
        checks, src = reconcile(a, b, c, config)
        checks = remedies.attach(checks, src, argv)
        middle = time.perf_counter()
        row = corrected_row(cfg, checks, a, c, out, lambda *abc: reconcile(*abc, config))
        end = time.perf_counter()
        typed.append(middle - start)
        fixed.append(end - middle)
        said = {"cleared": len(row[0].evidence["cleared"]), "remaining": len(row[0].evidence["remaining"])}
    result = {
        "bench": "corrected_line",
        "typed_s": round(min(typed), 3),
        "corrected_s": round(min(fixed), 3),
        "ratio": round(min(fixed) / min(typed), 3),
        **said,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
