"""The metrics log itself (`MetricsLog`), its digests and the determinism switches it applies on open;
imported through `pipeline.trainlog`, whose docstring says how a trainer uses it."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import sys
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from pipeline.trainlog.spec import (
    ENV_AFTER,
    ENV_HORIZON,
    ENV_KEYS,
    ENV_MIN_STEPS,
    ENV_MODE,
    EVENTS_FILE,
    INTENT_FILE,
    METRICS_FILE,
    NONDET_RE,
    NORM_KEY_RE,
    REPORT_FILE,
    metrics_name,
    rank_and_world,
)


def to_float(value: Any) -> float:
    """A Python float holding exactly the tensor's value (float32 -> float64 is exact)."""
    if isinstance(value, torch.Tensor):
        return float(
            value.detach().float().item()
            if value.dtype in (torch.bfloat16, torch.float16)
            else value.detach().item()
        )
    return float(value)


def _dtype_name(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return str(value.dtype).removeprefix("torch.")
    return "float64"


def hex_or_text(value: float) -> str:
    """`float.hex()`, with nan/inf spelled so that JSON stays valid."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value.hex()


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The raw bytes of a tensor in any dtype (bfloat16 has no numpy view, so go through uint8)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 over (key, dtype, shape, bytes) in sorted key order: equal iff the weights are bit-equal."""
    hasher = hashlib.sha256()
    for key in sorted(state):
        tensor = state[key]
        header = f"{key}\0{str(tensor.dtype)}\0{tuple(tensor.shape)}\0"
        hasher.update(header.encode())
        hasher.update(tensor_bytes(tensor))
    return "sha256:" + hasher.hexdigest()


def batch_digest(batch: Any) -> str:
    """sha256 over the input batch: tensors/arrays by bytes, mappings in sorted key order."""
    hasher = hashlib.sha256()
    _feed(hasher, batch)
    return "sha256:" + hasher.hexdigest()


def _feed(hasher: Any, value: Any) -> None:
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            hasher.update(f"{key}\0".encode())
            _feed(hasher, value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            _feed(hasher, item)
    elif isinstance(value, torch.Tensor):
        hasher.update(f"{value.dtype}\0{tuple(value.shape)}\0".encode())
        hasher.update(tensor_bytes(value))
    else:
        hasher.update(repr(value).encode())


def model_digest(model: torch.nn.Module) -> str:
    """Digest of the unwrapped module (a DDP wrapper's `module.` prefix would make ranks differ)."""
    inner = getattr(model, "module", model)
    return state_digest(inner.state_dict())


def apply_determinism(mode: str | None = None) -> dict[str, Any]:
    """Set torch's determinism switches from `PREFLIGHT_DETERMINISTIC`; returns what was set."""
    mode = (mode if mode is not None else os.environ.get(ENV_MODE, "")).strip().lower()
    if mode in ("1", "true", "yes", "on"):
        deterministic_algorithms(warn_only=False)
    elif mode == "warn":
        deterministic_algorithms(warn_only=True)
    if mode in ("1", "true", "yes", "on", "warn"):
        torch.backends.cudnn.benchmark = False
    return {
        "mode": mode or "unset",
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }


INDUCTOR_CONFIG = "torch._inductor.config"
INDUCTOR_ENV = "TORCHINDUCTOR_DETERMINISTIC"  # what that config reads into `deterministic` on import


def deterministic_algorithms(warn_only: bool) -> None:
    """`torch.use_deterministic_algorithms(True, warn_only=...)` without its import of Inductor's config,
    which imports `torch._dynamo`: ~1.9 CPU-s, as long as torch's own import, in every twin of a trainer
    that never compiles. The config reads `TORCHINDUCTOR_DETERMINISTIC` when first imported, so a later
    `torch.compile` is as deterministic as the public call makes it; an already imported config is set
    as that call sets it (by the call itself)."""
    if INDUCTOR_CONFIG in sys.modules or not hasattr(torch._C, "_set_deterministic_algorithms"):
        torch.use_deterministic_algorithms(True, warn_only=warn_only)
        return
    os.environ[INDUCTOR_ENV] = "1"
    torch._C._set_deterministic_algorithms(True, warn_only=warn_only)


def device_info() -> dict[str, Any]:
    """What the run computed on: bit-identity is only expected on the same kind of device."""
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "device": "cpu",
        "gpu": None,
    }
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        info.update(
            device="cuda",
            gpu=torch.cuda.get_device_name(index),
            capability=".".join(map(str, torch.cuda.get_device_capability(index))),
        )
    return info


class MetricsLog:
    """Append-only JSON-lines writer; each line is flushed so a crashed run still shows its last step."""

    def __init__(
        self,
        out_dir: str | Path,
        *,
        digest_every: int | None = 1,
        digest_steps: Iterable[int] = (),
        name: str = METRICS_FILE,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.rank, self.world = rank_and_world()
        self.path = self.out_dir / metrics_name(self.rank, self.world, name)
        self.digest_every, self.digest_steps = digest_every, frozenset(digest_steps)
        self.settings = apply_determinism()
        self.nondeterministic_ops: set[str] = set()
        self._previous_showwarning = warnings.showwarning
        warnings.showwarning = self._showwarning
        self._handle = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.events_path = self.out_dir / metrics_name(self.rank, self.world, EVENTS_FILE)
        self.events_path.write_text("", encoding="utf-8")
        self.last_step, self.seen = 0, {}  # seen: event -> first step
        self.wanted = [e for e in os.environ.get(ENV_HORIZON, "").split(",") if e]
        self.after = int(os.environ.get(ENV_AFTER, "0") or 0)
        self.min_steps = int(os.environ.get(ENV_MIN_STEPS, "0") or 0)

    def _showwarning(
        self,
        message: Any,
        category: Any,
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        found = NONDET_RE.search(str(message))
        if found:
            self.nondeterministic_ops.add(found.group(1))
        self._previous_showwarning(message, category, filename, lineno, file, line)

    def wants_digest(self, step: int) -> bool:
        return step in self.digest_steps or bool(self.digest_every and step % self.digest_every == 0)

    def event(self, name: str, step: int | None = None) -> None:
        """Mark an event (epoch_end, eval, checkpoint_save, lr_change) after `step` (default: the last
        step logged), so the stage can tell whether its smoke run reached it."""
        at = self.last_step if step is None else int(step)
        self.seen.setdefault(str(name), at)
        with open(self.events_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"event": str(name), "step": at}) + "\n")

    @property
    def stop(self) -> bool:
        """True once the events the stage asked for were seen and `after` steps past the last logged.

        Without a request from the stage it stays False: the loop runs its own `--steps`."""
        if not self.wanted or self.last_step < self.min_steps:
            return False
        if any(e not in self.seen for e in self.wanted):
            return False
        return self.last_step >= max(self.seen[e] for e in self.wanted) + self.after

    def watch(self, loader: Any) -> Any:
        """Fingerprint the random streams of `loader`'s workers (see `pipeline.trainlog.workers`)."""
        from pipeline.trainlog.workers import watch

        return watch(loader, self.out_dir / ("workers" if self.world <= 1 else f"workers.rank{self.rank}"))

    def step(
        self,
        step: int,
        *,
        model: torch.nn.Module | None = None,
        batch: Any = None,
        **metrics: Any,
    ) -> dict[str, Any]:
        """Write one line: the values, their exact hex forms and dtypes, and maybe a parameter digest."""
        record: dict[str, Any] = {"step": int(step)}
        self.last_step = int(step)
        exact: dict[str, str] = {}
        dtypes: dict[str, str] = {}
        for key, value in metrics.items():
            if value is None:
                continue
            number = to_float(value)
            record[key] = number if math.isfinite(number) else hex_or_text(number)
            exact[key], dtypes[key] = hex_or_text(number), _dtype_name(value)
        record["hex"], record["dtype"] = exact, dtypes
        if model is not None and self.wants_digest(step):
            record["param_digest"] = model_digest(model)
        if batch is not None:
            record["batch_digest"] = batch_digest(batch)
        self._handle.write(json.dumps(record, allow_nan=False) + "\n")
        self._handle.flush()
        return record

    def close(self) -> None:
        """Flush and write `determinism.json` (settings, device, nondeterministic ops hit)."""
        if self._handle.closed:
            return
        self._handle.close()
        warnings.showwarning = self._previous_showwarning
        report = {
            "rank": self.rank,
            "world_size": self.world,
            "settings": self.settings,
            "nondeterministic_ops": sorted(self.nondeterministic_ops),
            "device": device_info(),
            "env": {k: os.environ.get(k) for k in ENV_KEYS},
            "events": self.seen,
            "last_step": self.last_step,
        }
        suffix = "" if self.world <= 1 else f".rank{self.rank}"
        (self.out_dir / REPORT_FILE.replace(".json", f"{suffix}.json")).write_text(
            json.dumps(report, indent=2) + "\n", encoding="utf-8"
        )

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def norm_buffers(model: torch.nn.Module, pattern: str = NORM_KEY_RE) -> dict[str, torch.Tensor]:
    """The state-dict entries that hold normalization stats (LeRobot's `normalize_*.buffer_*` names)."""
    inner = getattr(model, "module", model)
    regex = re.compile(pattern)
    return {k: v.detach().cpu().contiguous() for k, v in inner.state_dict().items() if regex.search(k)}


def write_intent(
    source: torch.nn.Module | Mapping[str, Any], out_dir: str | Path, pattern: str = NORM_KEY_RE
) -> Path:
    """What training normalized with, for the reload check to compare re-injected stats against.

    `source` is either the stats as a flat mapping (`"observation.state.mean": array`) or a module whose
    `normalize_*.buffer_*` buffers hold them (LeRobot's older layout).
    """
    from safetensors.torch import save_file

    if isinstance(source, torch.nn.Module):
        tensors = norm_buffers(source, pattern)
    else:
        tensors = {k: torch.as_tensor(v).detach().cpu().contiguous() for k, v in source.items()}
    path = Path(out_dir) / INTENT_FILE
    save_file(tensors, str(path))
    return path
