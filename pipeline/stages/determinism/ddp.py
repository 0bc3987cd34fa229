"""The DDP part's rows: every rank's all-reduced loss, grad norm and weights agree, and the run ended.

Agreement and ending are two findings. A torchrun whose ranks all logged the same steps with the same
bits and then died leaving the process group (a rank aborted with "terminate called without an active
exception" while another still saved) trained deterministically: the `ddp` row says the ranks agree,
and a soft `ddp.teardown` row names the exit and the line that killed it. Only a run whose ranks did
not all log the same steps is an `error` that the ranks did not complete.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pipeline.record.records import Check, Rows
from pipeline.stages.determinism import compare
from pipeline.stages.determinism.config import NAME
from pipeline.stages.determinism.outcome import Outcome
from pipeline.trainlog.spec import metrics_name

ROWS = Rows(NAME, "determinism")
LOG_READ_BYTES = 256 * 1024  # the end of the part's log that is searched for how the processes died
# what a process that died leaving the group prints: C++'s std::terminate, a fatal signal from torchrun
ABORT_LINES = re.compile(
    r"terminate called[^\n]*|Fatal Python error:[^\n]*|exitcode\s*:\s*-\d+[^\n]*|Signal \d+ \(SIG\w+\)[^\n]*"
)


def ddp_checks(outcome: Outcome, nproc: int, metrics_file: str, steps: int) -> list[Check]:
    evidence: dict[str, Any] = {"ddp": outcome.evidence(), "nproc": nproc}
    if outcome.input_error:
        return [ROWS("ddp", "ddp", "error", f"ddp part {outcome.problem}", evidence=evidence)]
    code = outcome.record.get("returncode")
    ended = (outcome.folder / "done.json").exists() and code == 0
    streams = _rank_streams(outcome, nproc, metrics_file)
    lengths = {rank: len(s.rows) for rank, s in streams.items()}
    finished = len(streams) == nproc and len(set(lengths.values())) == 1 and lengths[0] > 0
    if not finished:
        missing = [r for r in range(nproc) if r not in streams]
        told = f"; rank(s) {missing} wrote no metrics stream" if missing else f"; steps per rank {lengths}"
        message = f"torchrun --nproc_per_node={nproc} did not complete (exit {code}){told}"
        return [ROWS("ddp", "ddp", "error", message, evidence=evidence)]
    rows = [_agreement(streams, nproc, steps, evidence)]
    if not ended:
        rows.append(_teardown(outcome, nproc, lengths[0], code))
    return rows


def _rank_streams(outcome: Outcome, nproc: int, metrics_file: str) -> dict[int, compare.Stream]:
    streams = {}
    for rank in range(nproc):
        path = outcome.folder / "run" / metrics_name(rank, nproc, metrics_file)
        if path.is_file():
            streams[rank] = compare.read_stream(path)
    return streams


def _agreement(streams: dict[int, compare.Stream], nproc: int, steps: int, evidence: dict) -> Check:
    per_rank = {rank: compare.divergences(streams[0], s) for rank, s in streams.items() if rank}
    evidence.update(per_rank=per_rank, steps={r: len(s.rows) for r, s in streams.items()})
    bad = {r: compare.earliest(d) for r, d in per_rank.items() if compare.earliest(d)}
    if bad:
        rank, hit = min(bad.items(), key=lambda kv: kv[1]["step"])
        message = f"rank {rank} disagrees with rank 0: {compare.describe(hit)}"
        return ROWS(
            "ddp", "ddp", "mismatch", message, expected="ranks agree", actual=f"rank {rank} differs",
            evidence=evidence,
        )  # fmt: skip
    return ROWS(
        "ddp",
        "ddp",
        "match",
        f"{nproc} ranks completed {len(streams[0].rows)} step(s); loss, grad norm "
        "and parameter digests agree across ranks",
        expected="ranks agree",
        actual="agree",
        configured={"ddp_procs": nproc, "steps": steps},
        evidence=evidence,
    )


def _abort_lines(outcome: Outcome) -> list[str]:
    """The lines that say how the processes died, from the part's whole log (its tail is torchrun's
    summary): std::terminate's own words first, then the signals."""
    text = str(outcome.record.get("log_tail") or "")
    log = outcome.record.get("log")
    if isinstance(log, str) and Path(log).is_file():
        with open(log, "rb") as handle:
            handle.seek(max(0, Path(log).stat().st_size - LOG_READ_BYTES))
            text = handle.read().decode("utf-8", "replace")
    found = list(dict.fromkeys(m.group(0).strip() for m in ABORT_LINES.finditer(text)))
    return sorted(found, key=lambda line: not line.startswith(("terminate", "Fatal")))


def _teardown(outcome: Outcome, nproc: int, logged: int, code: Any) -> Check:
    tail = str(outcome.record.get("log_tail") or "")
    lines = _abort_lines(outcome)
    said = f": {'; '.join(lines[:3])}" if lines else ""
    message = (
        f"all {nproc} ranks logged the same {logged} step(s), then torchrun exited {code} while the "
        f"processes ended{said}. The training agrees across ranks; leaving the process group does not "
        "end cleanly (a rank that exits while another still uses the group, or a DDP object alive at "
        "interpreter exit: a barrier before destroy_process_group, with the wrapper freed first). On a "
        "cluster this job ends FAILED, so afterok chains on it never start"
    )
    return ROWS(
        "ddp.teardown", "ddp", "mismatch", message, severity="soft",
        expected="exit 0 after the last step", actual=f"exit {code}",
        evidence={"returncode": code, "abort_lines": lines, "log_tail": tail[-800:]},
    )  # fmt: skip
