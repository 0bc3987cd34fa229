"""The corrected training line, proven: every line remedy applied to the user's lerobot-train argv, and
the same reconciliation run again on it before anyone launches it.

A remedy read from one row could clear that row and raise another (dropping a normalization override
makes the base's QUANTILES mode need quantiles the dataset does not ship). So the corrected line is
judged as the typed one was: A as it is, B composed from the corrected argv by the same composer (lerobot's
own where the job imports it), C the same data facts restricted to the corrected `--dataset.episodes`
(no second data pass). One soft row, `contract.training.corrected`, says "with this line: clear", or
names the rows that remain and the data remedy each has (or that it has none). It never blocks and hides
nothing: the gate judges the line as typed.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.errors import InputError
from pipeline.readers import lerobot_command, read_training
from pipeline.readers.base import Contract, DatasetContract
from pipeline.record.records import Check, Rows
from pipeline.record.remedy import CORRECTED
from pipeline.stages.contract import remedies
from pipeline.stages.contract.rows import NAME, Sources
from pipeline.storage import atomic_write_text

ROWS = Rows(NAME, "diagnostics")
ROW = CORRECTED.removeprefix(f"{NAME}.")
CONFIG = "corrected_train_config.json"

Reconcile = Callable[[Contract, Contract, DatasetContract], tuple[list[Check], Sources]]


def line_changes(checks: Sequence[Check]) -> tuple[dict[str, str], list[str]]:
    """The flags every line remedy sets (one agreed value per flag) and the flags they drop."""
    sets: dict[str, str] = {}
    drops: list[str] = []
    for check in checks:
        remedy = check.remedy or {}
        if remedy.get("kind") != "line" or not check.blocking:
            continue
        sets.update(remedy.get("set") or {})
        drops += [k for k in remedy.get("drop") or [] if k not in drops]
    return sets, drops


def apply(argv: Sequence[str], sets: dict[str, str], drops: Sequence[str]) -> list[str]:
    """`argv` with each dropped flag removed and each set flag given `--key=value` where it stood (or
    at the end): every other item exactly as typed, quotes and all."""
    argv = list(argv)
    start = lerobot_command._args_start(argv)
    out, done = argv[:start], set()
    for key, tokens in _flag_groups(argv[start:]):
        if key in drops:
            continue
        if key in sets:
            out.append(f"--{key}={sets[key]}")
            done.add(key)
        else:
            out += tokens
    out += [f"--{k}={v}" for k, v in sets.items() if k not in done and k not in drops]
    return out


def _flag_groups(args: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Each flag's key and the items that spell it (`--k=v`, `--k v`, a bare `--k`), as parse_flags
    reads them."""
    groups, i = [], 0
    while i < len(args):
        item = args[i]
        key, eq, _ = item[2:].partition("=")
        tokens = [item]
        if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
            tokens.append(args[i + 1])
            i += 1
        groups.append((key.replace("-", "_"), tokens))
        i += 1
    return groups


def remedied(
    cfg: DictConfig, checks: list[Check], src: Sources, out_dir: Path, again: Reconcile
) -> list[Check]:
    """The rows with their remedies, and the corrected line's verdict where a training line was judged."""
    checks = remedies.attach(checks, src, lerobot_command.training_argv(cfg))
    return checks + corrected_row(cfg, checks, src.a, src.c, out_dir, again)


def corrected_row(
    cfg: DictConfig, checks: list[Check], a: Contract, c: DatasetContract, out_dir: Path, again: Reconcile
) -> list[Check]:
    """The row for a judged lerobot-train line (none for a training config file or another program)."""
    argv = lerobot_command.training_argv(cfg)
    if not argv or lerobot_command.parse(argv) is None:
        return []
    blocking = [ch for ch in checks if ch.blocking]
    if not blocking:
        return []
    sets, drops = line_changes(checks)
    if not sets and not drops:
        return [_verdict(argv, argv, blocking, [], "no row has a line remedy")]
    fixed = apply(argv, sets, drops)
    try:
        b = read_training(str(_compose(cfg, fixed, out_dir)))
    except InputError as exc:
        evidence = {"argv": fixed, "typed": argv, "refused": str(exc)}
        message = f"the corrected line was not judged: composing it failed ({exc}): {shlex.join(fixed)}"
        return [ROWS(ROW, "training", "mismatch", message, severity="soft", evidence=evidence)]
    rows, src = again(a, b, c)
    rows = remedies.attach(rows, src, fixed)
    judged = {ch.id for ch in rows}
    remaining = [ch for ch in rows if ch.blocking]
    remaining += [ch for ch in blocking if ch.id not in judged]  # rows not judged again (D, shards)
    return [_verdict(fixed, argv, blocking, remaining, "")]


def _compose(cfg: DictConfig, argv: list[str], out_dir: Path) -> Path:
    """B from the corrected argv, by lerobot where the job imports it, else by our reader (as B was)."""
    command = lerobot_command.parse(argv)
    assert command is not None
    dataset = Path(str(cfg.dataset.path))
    model = (cfg.get("model") or {}).get("path")
    composed = lerobot_command.compose_with_lerobot(command, dataset)
    if composed is None:
        base = Path(str(model)) if model and command.policy_path else None
        composed = lerobot_command.compose_training(command, base, dataset)
    text = json.dumps(composed, indent=2, sort_keys=True, default=str) + "\n"
    return atomic_write_text(out_dir / CONFIG, text)


def _verdict(
    fixed: list[str], typed: list[str], blocking: list[Check], remaining: list[Check], why: str
) -> Check:
    cleared = sorted({ch.id for ch in blocking} - {ch.id for ch in remaining})
    left = [{"id": ch.id, "remedy": ch.remedy} for ch in remaining]
    evidence: dict[str, Any] = {"argv": fixed, "typed": typed, "cleared": cleared, "remaining": left}
    line = shlex.join(fixed)
    if not remaining:
        message = f"with this line: clear ({len(cleared)} row(s) cleared): {line}"
        return ROWS(ROW, "training", "match", message, severity="soft", actual="clear", evidence=evidence)
    named = "; ".join(f"{ch.id} ({_why(ch)})" for ch in remaining)
    head = why or f"with this line, {len(cleared)} row(s) cleared and {len(remaining)} remain"
    message = f"{head}: {named}" + (f"; the line: {line}" if fixed != typed else "")
    actual = f"{len(remaining)} row(s) remain"
    return ROWS(ROW, "training", "mismatch", message, severity="soft", actual=actual, evidence=evidence)


def _why(check: Check) -> str:
    remedy = check.remedy or {}
    kind = remedy.get("kind")
    if kind == "data":
        return "no flag mends it; data remedy: " + str(remedy.get("summary"))
    if kind == "undecided":
        return "no line remedy: " + str(remedy.get("decide"))
    if kind == "line":
        return "its line remedy did not clear it"
    return "no remedy read from its evidence"
