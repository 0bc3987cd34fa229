"""The run folder: every path and file name of one run, and the reads and writes of its records.

Modelled on submitit's `JobPaths`: launch, plan, the jobs, the gate and `status` ask this object where
a file lives instead of spelling `plan.json` or `stages/<stage>.json` themselves. A run folder is built
from `(output_root, run_id)` in one place (`RunFolder.of`); a job, which only carries the folder's
path, wraps it with `RunFolder(path)`. The gate's exit code and the lines that report it are computed
here too, so the launcher, the gate job and `status` say the same thing.

    <output_root>/runs/<run_id>/
        config.yaml  plan.json  jobs.json  gate.json  .launch.lock
        train_config.json  train.sbatch   (B composed from the command after `--`; its chained job)
        stages/<stage>.json        submitit/<job id>/
        artifacts/<stage>/         state/<stage>/<part|main>/      parts/<stage>/<part>/
        gate.incomplete.json  gate_failure.json   (only when the gate could not write its records)

`gate.json` is the gate's last write, after the audit record (markdown, JSON twin, timeline row): its
presence means the whole record exists, so the launcher never says "clear" without one.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline.errors import ConfigError, InputError, RecordError
from pipeline.record.records import GateRecord, StageResult
from pipeline.storage import atomic_write_json, atomic_write_text
from pipeline.storage.files import read_pinned

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
PART_DONE = "done.json"  # a part job's last write: the part ran to its end
PART_INPUT_ERROR = "input_error.json"  # instead of done.json: the part stopped on a bad input (one line)
NO_GATE_EXIT = 1  # no complete record (the gate job or one of its writes failed): neither 0 nor 3
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def default_output_root() -> Path:
    """`output_root` as the shipped config sets it (`$PREFLIGHT_OUTPUT_ROOT`, else `./preflight`), for
    tools that run without Hydra (`status`): the default lives in `conf/config.yaml` only."""
    cfg = OmegaConf.load(CONF_DIR / "config.yaml")
    return Path(str(cfg.output_root))


def demo_dir(output_root: str | Path) -> Path:
    """Where the embedded demo is built once and reused by every run under this output root."""
    return Path(output_root) / "demo"


PROBE_CACHE_ENV = "PREFLIGHT_PROBE_CACHE"
_CONFIGS: dict[tuple[str, int, int, int], DictConfig] = {}  # `load_config`'s one parsed file


def probe_cache_file(output_root: str | Path) -> Path:
    """Where container_check keeps its node measurements (torch, CUDA, GL) for every run under this output
    root, each under the digest of the host, image and software it measured (`stages/probe_cache.py`).
    `$PREFLIGHT_PROBE_CACHE` names one file for every output root instead (a CI runner's fresh checkouts,
    a test session's launches, each in a new folder): the digest, not the folder, says what was measured,
    so a new folder need not import torch and open a GL context again to learn the same facts."""
    shared = os.environ.get(PROBE_CACHE_ENV)
    return Path(shared) if shared else Path(output_root) / "probe_cache.json"


def composed_text(cfg: DictConfig) -> str:
    """B as the launch composed it from the training command, checked against the digest the launch
    kept in the run's config: the composed folder is shared, so its file is judged only as written."""
    training = cfg.training
    digest = training.get("composed_sha256")
    if not digest:
        message = "training.composed_sha256: missing beside training.composed_by; launch the run again"
        raise InputError(message, field="training.composed_sha256")
    what = "the training config the launch composed from the training command"
    return read_pinned(Path(str(training.path)), what, str(digest), Path(str(cfg.output_root)))


@dataclass(frozen=True)
class RunFolder:
    """One run's directory; every path below it comes from a method here."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @classmethod
    def of(cls, output_root: str | Path, run_id: str) -> RunFolder:
        """The one place a run's path is built from the launch's `output_root` and the run id; a run
        id is a name (letters, digits, `._-`, not starting with a dot), never a path."""
        if not RUN_ID.fullmatch(str(run_id)):
            raise ConfigError(
                "run_id",
                f"{str(run_id)!r} is not a run id: expected a name of letters, digits, '.', '_', '-' "
                "(up to 128, starting with a letter or digit), not a path",
            )
        return cls((Path(output_root) / "runs" / str(run_id)).resolve())

    @classmethod
    def find(cls, run: str, output_root: str | Path | None = None) -> RunFolder:
        """A run given by the user: a run directory, or a run id under `output_root` (default: the
        shipped config's)."""
        if Path(run).is_dir() or "/" in run:
            return cls(Path(run).resolve())
        return cls.of(output_root if output_root is not None else default_output_root(), run)

    @classmethod
    def latest(cls, output_root: str | Path | None = None) -> RunFolder:
        """The newest run under `output_root` (run ids start with their launch time), as `git status`
        shows the repository you are in; none there is an InputError naming where it looked."""
        runs = Path(output_root if output_root is not None else default_output_root()) / "runs"
        found = sorted(p for p in runs.glob("*") if (p / "plan.json").is_file()) if runs.is_dir() else []
        if not found:
            raise InputError(
                f"{runs.resolve()}: no run found (give a run id or a run directory, or --output-root)",
                path=runs,
                field="run",
            )
        return cls(found[-1].resolve())

    @property
    def run_id(self) -> str:
        return self.root.name

    # ------------------------------------------------------------------------------------ paths
    @property
    def config_file(self) -> Path:
        return self.root / "config.yaml"

    @property
    def train_config_file(self) -> Path:
        """The training config composed from the command after `--` (what the record judged as B)."""
        return self.root / "train_config.json"

    @property
    def chain_script(self) -> Path:
        """The batch script of the training job chained on the gate (the command after `--`)."""
        return self.root / "train.sbatch"

    @property
    def plan_file(self) -> Path:
        return self.root / "plan.json"

    @property
    def jobs_file(self) -> Path:
        return self.root / "jobs.json"

    @property
    def gate_file(self) -> Path:
        return self.root / "gate.json"

    @property
    def incomplete_gate_file(self) -> Path:
        """The decision of a gate whose audit record could not be written: evidence, never a record."""
        return self.root / "gate.incomplete.json"

    @property
    def gate_failure_file(self) -> Path:
        """Which of the gate's writes failed, and where the files that did get written are."""
        return self.root / "gate_failure.json"

    @property
    def lock_file(self) -> Path:
        """Held by the launch of this run id for as long as it runs (one launch per run at a time)."""
        return self.root / ".launch.lock"

    @property
    def submitit_dir(self) -> Path:
        """submitit's folder template: `%j` becomes each job's id (its logs, pickles and result)."""
        return self.root / "submitit" / "%j"

    def submitted_file(self, job_id: str) -> Path:
        """submitit's pickle of a submitted job: written when the job really was queued or started."""
        return self.root / "submitit" / job_id / f"{job_id}_submitted.pkl"

    def result_file(self, stage: str) -> Path:
        return self.root / "stages" / f"{stage}.json"

    def artifacts_dir(self, stage: str) -> Path:
        """Plots and JSON dumps a stage's record links to; created on first use."""
        path = self.root / "artifacts" / stage
        path.mkdir(parents=True, exist_ok=True)
        return path

    def state_dir(self, stage: str, part: str | None = None) -> Path:
        """Scratch that survives a requeue: a resumed job finds here what it saved before preemption."""
        path = self.root / "state" / stage / (part or "main")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def part_dir(self, stage: str, part: str) -> Path:
        """What part `part` of `stage` left for the stage's main job to merge."""
        return self.parts_dir(stage) / part

    def parts_dir(self, stage: str) -> Path:
        """Every part's folder of `stage` (job array tasks included: `<part>-<task>`)."""
        return self.root / "parts" / stage

    def part_done_file(self, stage: str, part: str) -> Path:
        return self.part_dir(stage, part) / PART_DONE

    def part_input_error_file(self, stage: str, part: str) -> Path:
        return self.part_dir(stage, part) / PART_INPUT_ERROR

    # ------------------------------------------------------------------------------------ reads
    def load_config(self) -> DictConfig:
        """The run's config.yaml; parsed once per process and file version (the in-process jobs, stage
        and gate, read the same file: 0.2 s a parse), each caller given its own copy."""
        try:
            st = os.stat(self.config_file)
            key = (str(self.config_file), st.st_ino, st.st_size, st.st_mtime_ns)
            cfg = _CONFIGS[key] if key in _CONFIGS else OmegaConf.load(self.config_file)
        except (OSError, OmegaConfBaseException, ValueError) as exc:
            what = f"{self.config_file}: cannot read the run's config: {exc}"
            raise InputError(what, path=self.config_file) from None
        if not isinstance(cfg, DictConfig):
            raise InputError(f"{self.config_file}: expected a mapping", path=self.config_file)
        _CONFIGS.clear()
        _CONFIGS[key] = cfg
        return copy.deepcopy(cfg)

    def load_plan(self) -> dict[str, Any]:
        plan = self._json(self.plan_file, "plan")
        if not isinstance(plan, dict) or not isinstance(plan.get("jobs"), dict):
            raise RecordError(
                f"{self.plan_file}: no `jobs` mapping; is this a run folder?", path=self.plan_file
            )
        return plan

    def load_jobs(self) -> dict[str, dict[str, Any]]:
        """Job ids and last known states by job name; empty before the first submission."""
        return self._json(self.jobs_file, "jobs") if self.jobs_file.exists() else {}

    def load_result(self, stage: str) -> StageResult:
        """Raises FileNotFoundError when the stage left nothing, RecordError when it is unreadable
        (truncated, corrupt, not a stage result): a result to redo, not a crash."""
        path = self.result_file(stage)
        if not path.exists():
            raise FileNotFoundError(path)
        data = self._json(path, "stage result")
        try:
            return StageResult.from_dict(data)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise RecordError(f"{path}: not a stage result: {exc}", path=path) from None

    def result_status(self, stage: str) -> str:
        """A stage's status for tables; empty while it has no result, `corrupt` when it is unreadable."""
        try:
            return self.load_result(stage).status
        except FileNotFoundError:
            return ""
        except (OSError, ValueError, TypeError):
            return "corrupt"

    def load_gate(self) -> GateRecord | None:
        if not self.gate_file.exists():
            return None
        try:
            return GateRecord.from_dict(self._json(self.gate_file, "gate record"))
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise RecordError(f"{self.gate_file}: not a gate record: {exc}", path=self.gate_file) from None

    def _json(self, path: Path, what: str) -> Any:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{path}: no {what} here; is {self.root} a run folder?", path=path) from None
        except (OSError, ValueError) as exc:
            raise RecordError(f"{path}: unreadable {what}: {exc}", path=path) from None

    # ----------------------------------------------------------------------------------- writes
    def write_config(self, cfg: DictConfig) -> Path:
        if (cfg.get("training") or {}).get("composed_by"):  # B composed from the command: kept here too
            atomic_write_text(self.train_config_file, composed_text(cfg))
        return atomic_write_text(self.config_file, OmegaConf.to_yaml(cfg))

    def write_plan(self, document: dict[str, Any]) -> Path:
        return atomic_write_json(self.plan_file, document)

    def write_jobs(self, rows: dict[str, dict[str, Any]]) -> Path:
        return atomic_write_json(self.jobs_file, rows)

    def write_result(self, stage: str, result: StageResult) -> Path:
        return atomic_write_json(self.result_file(stage), result.to_dict())

    def write_gate(self, record: GateRecord) -> Path:
        return atomic_write_json(self.gate_file, record.to_dict())

    def clear_gate(self) -> None:
        """Before the gate (re)decides: no earlier decision may stand for this one if a write fails."""
        for path in (self.gate_file, self.incomplete_gate_file, self.gate_failure_file):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def record_gate_failure(self, record: GateRecord | None, message: str, written: list[Path]) -> str:
        """Best effort (the disk may be full): keep the decision as `gate.incomplete.json` and say which
        write failed and what was written; returns the one line to print."""
        with contextlib.suppress(OSError, ValueError):
            if record is not None:
                written = [*written, atomic_write_json(self.incomplete_gate_file, record.to_dict())]
        files = ", ".join(map(str, written)) or "none"
        line = f"{message}; no gate.json, so no clear; files written: {files}"
        with contextlib.suppress(OSError, ValueError):
            atomic_write_json(self.gate_failure_file, {"message": line, "written": [str(p) for p in written]})
        return line

    def gate_failure(self) -> str | None:
        try:
            return str(json.loads(self.gate_failure_file.read_text(encoding="utf-8"))["message"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # ------------------------------------------------------------------------------------- gate
    def gate_outcome(self) -> tuple[int, list[str]]:
        """The gate's exit code (0 clear, 3 blocked, 1 no record) and the lines that report it."""
        try:
            record = self.load_gate()
        except (RecordError, ValueError, TypeError) as exc:
            return NO_GATE_EXIT, [f"gate: unreadable record {self.gate_file}: {exc}"]
        if record is None:
            failure = self.gate_failure()
            if failure:
                return NO_GATE_EXIT, [f"gate: no complete record: {failure}"]
            return NO_GATE_EXIT, [
                f"gate: no record at {self.gate_file}; the gate job itself failed (see {self.root}/submitit)"
                + self._full_hint()
            ]
        return record.exit_code, [f"gate: {record.gate} ({record.verdict})"] + [
            f"  - {reason}" for reason in record.reasons
        ]

    def _full_hint(self) -> str:
        """Where the run folder's own filesystem is full, the gate's log may be empty too: say so."""
        try:
            stat = os.statvfs(self.root)
        except OSError:
            return ""
        free = stat.f_bavail * stat.f_frsize
        return f"; {self.root} is on a full filesystem ({free // 1024} KiB free)" if free < 2**20 else ""

    def report_gate(self, say: Callable[[str], Any] = print) -> int:
        """Print the gate's result (one line, then one per reason) and return its exit code."""
        code, lines = self.gate_outcome()
        for line in lines:
            say(line)
        return code

    # --------------------------------------------------------------------------------- lifecycle
    def sweep_partial(self) -> list[Path]:
        """Remove what a job killed mid-write (a full disk) leaves in submitit's folder: its
        `*.save_tmp` files and 0-byte pickles, which submitit would later fail to read."""
        removed = []
        base = self.root / "submitit"
        for path in [*base.glob("**/*.save_tmp"), *base.glob("**/*.pkl")]:
            with contextlib.suppress(OSError):
                if path.suffix == ".save_tmp" or path.stat().st_size == 0:
                    path.unlink()
                    removed.append(path)
        return removed

    # --------------------------------------------------------------------------------- lifecycle
    def missing_parents(self) -> list[Path]:
        """The folders from the run folder up that do not exist yet: what a failed launch removes."""
        missing, path = [], self.root
        while not path.exists():
            missing.append(path)
            path = path.parent
        return missing

    def discard(self, created: list[Path]) -> None:
        """Undo a launch that failed before anything was submitted: remove the run folder if this
        launch created it, then each parent it created that is left empty (never someone else's)."""
        if self.root in created and self.root.exists():
            shutil.rmtree(self.root)
        for path in created[1:]:
            try:
                os.rmdir(path)
            except OSError:
                break
