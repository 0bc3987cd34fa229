"""Image identity for container_check: is the image on the node the promoted one, and does the job run in it?

A rebuilt image under the same file name, a stale copy on a node's local disk or a job that silently
runs on the host all look fine to the environment probe. These checks read the image itself, inside
the job on the compute node (the path the node sees), with the SIF reader: readable, a well-formed SIF
for this node's architecture, the same sha256 the login node measured at launch (plan.json), the
promoted digest (`container.expect_sha256` or `container.promotion_record`), the required labels,
whether it is signed (verified with `apptainer verify` where the binary exists), and whether this
process runs inside it (Apptainer's `/.singularity.d/labels.json` is read from the root it sees).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from pipeline.errors import ConfigError, InputError
from pipeline.readers.promotion import read_promotion
from pipeline.readers.sif import SifImage, normalize_sha256, partition_sha256, read_sif, sha256_file
from pipeline.record.records import Check, Rows

rows = Rows("container_check", "container")
LABELS_IN_IMAGE = ".singularity.d/labels.json"
CONTAINER_ENV = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")
NODE_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
VERIFY_TIMEOUT_S = 300


def _section(cfg: Any) -> dict[str, Any]:
    container = cfg.get("container") if cfg is not None else None
    if isinstance(container, DictConfig):
        return dict(OmegaConf.to_container(container, resolve=True) or {})
    return dict(container or {})


def image_checks(cfg: DictConfig, run_dir: Path | None = None, root: Path = Path("/")) -> list[Check]:
    """All image rows for one container_check job; `root` is where this process sees `/`."""
    con = _section(cfg)
    if con.get("kind") != "apptainer" or not con.get("image"):
        return _pins_without_image(con)
    image = Path(str(con["image"]))
    try:
        sha = sha256_file(image)
    except OSError as exc:
        return [_unreadable(image, exc)]
    checks = [
        rows.judge(
            "image.readable",
            "image",
            True,
            f"{image} is readable from this job",
            actual=str(image),
            evidence={"host": platform.node(), "sha256": sha},
        )
    ]
    try:
        sif = read_sif(image)
        labels = sif.labels()
    except InputError as exc:
        return [*checks, rows("image.format", "image", "error", str(exc), evidence={"path": str(image)})]
    plan = _plan(run_dir)
    checks += [_format_check(sif), _login_check(sha, plan), _labels_check(labels, con)]
    checks += [
        _promoted_check(sha, labels, con),
        _signature_check(sif, con),
        _inside_check(image, labels, root),
    ]
    return [c for c in checks if c is not None]


def _plan(run_dir: Path | None) -> dict[str, Any]:
    path = Path(run_dir or ".") / "plan.json"
    return json.loads(path.read_text()) if run_dir is not None and path.is_file() else {}


def _pins_without_image(con: Mapping[str, Any]) -> list[Check]:
    pins = [k for k in ("expect_sha256", "promotion_record") if con.get(k)]
    if not pins:
        return []
    return [
        rows.judge(
            "image.promoted",
            "image",
            None,
            f"container.{pins[0]} is set but the jobs run without an image (container={con.get('kind')})",
            configured={k: con.get(k) for k in pins},
        )
    ]


def _unreadable(image: Path, exc: OSError) -> Check:
    return rows.judge(
        "image.readable",
        "image",
        False,
        f"{image} is not readable from this job on {platform.node()}: {exc.strerror or exc}",
        expected="readable",
        actual=str(exc),
        evidence={"path": str(image), "host": platform.node()},
    )


def _format_check(sif: SifImage) -> Check:
    part = sif.primary_partition
    node = NODE_ARCH.get(platform.machine(), platform.machine())
    if part is None:
        ok, message = False, f"{sif.path} has no primary system partition: nothing to run"
    else:
        ok = part.arch == node
        message = f"SIF {sif.version}, primary partition {part.fs} for {part.arch}; this node is {node}"
    return rows.judge(
        "image.format",
        "image",
        ok,
        message,
        expected=node,
        actual=part.arch if part else None,
        evidence={**sif.summary(), "partition_sha256": partition_sha256(sif)},
    )


def _login_check(sha: str, plan: Mapping[str, Any]) -> Check | None:
    login = plan.get("image_sha256")
    if not login:
        return None
    ok = login == sha
    message = (
        "the node sees the image the login node hashed at launch"
        if ok
        else "the node sees a different file than the login node hashed at launch (stale copy or rebuilt)"
    )
    return rows.judge(
        "image.same_as_login",
        "image",
        ok,
        message,
        expected=login,
        actual=sha,
        evidence={
            "login_sha256": login,
            "node_sha256": sha,
            "host": platform.node(),
            "plan_image_digest": plan.get("image_digest"),
        },
    )


def _promoted_check(sha: str, labels: dict[str, str], con: Mapping[str, Any]) -> Check | None:
    pinned: dict[str, Any] = {}
    try:
        if con.get("promotion_record"):
            pinned = read_promotion(con["promotion_record"])
        if con.get("expect_sha256"):
            pinned["sha256_expected"] = normalize_sha256(con["expect_sha256"], "container.expect_sha256")
    except InputError as exc:
        return rows(
            "image.promoted", "image", "error", str(exc), evidence={"path": exc.path, "field": exc.field}
        )
    wanted = sorted({v for k, v in pinned.items() if k in ("sha256", "sha256_expected")})
    if not wanted:
        if not con.get("require_promotion"):
            return None
        return rows.judge(
            "image.promoted",
            "image",
            None,
            "no promotion pinned: set container.expect_sha256 or container.promotion_record",
            actual=sha,
        )
    ok = wanted == [sha]
    who = f" by {pinned['who']} on {pinned['date']}" if pinned.get("who") else ""
    message = (
        f"the image is the one promoted{who}"
        if ok
        else f"the image's sha256 {sha[:12]}… is not the promoted {' or '.join(w[:12] for w in wanted)}…{who}"
    )
    evidence = {"pinned": pinned, "node_sha256": sha, "labels": labels}
    return rows.judge(
        "image.promoted",
        "image",
        ok,
        message,
        expected=wanted[0] if len(wanted) == 1 else wanted,
        actual=sha,
        evidence=evidence,
    )


def required_labels(con: Mapping[str, Any]) -> dict[str, str]:
    """`require_labels` as {label: value}; a list, or an empty value, means "present, any value"."""
    raw = con.get("require_labels") or {}
    if isinstance(raw, (list, tuple)):
        return {str(k): "" for k in raw}
    if isinstance(raw, Mapping):
        return {str(k): "" if v is None else str(v) for k, v in raw.items()}
    raise ConfigError("container.require_labels", f"expected a list or a mapping of labels, got {raw!r}")


def _labels_check(labels: dict[str, str], con: Mapping[str, Any]) -> Check | None:
    wanted = required_labels(con)
    if not wanted:
        return None
    missing = [k for k in wanted if k not in labels]
    wrong = {k: labels[k] for k, v in wanted.items() if v and k in labels and labels[k] != v}
    problems = [f"missing label {k}" for k in missing] + [
        f"{k}={v!r}, expected {wanted[k]!r}" for k, v in wrong.items()
    ]
    message = "; ".join(problems) or f"labels present: {', '.join(wanted)}"
    return rows.judge(
        "image.labels",
        "image",
        not problems,
        message,
        expected=wanted,
        actual={k: labels.get(k) for k in wanted},
        evidence={"labels": labels},
    )


def _signature_check(sif: SifImage, con: Mapping[str, Any]) -> Check:
    severity = "hard" if con.get("require_signature") else "soft"
    signed = [{"id": s.id, "hash": s.hash_type, "entity": s.entity, "link": s.link} for s in sif.signatures]
    binary = shutil.which(str(con.get("binary") or "apptainer"))
    evidence: dict[str, Any] = {"signatures": signed, "verifier": binary}
    if not signed and severity == "soft":  # no policy asks for one: nothing is wrong, and the row says so
        message = (
            "the image carries no signature object, and none is asked for: "
            "container.require_signature=true makes an unsigned image (or one failing verify) block"
        )
        return rows("image.signature", "image", "skipped", message, actual="unsigned", evidence=evidence)
    if not signed:
        return rows.judge(
            "image.signature",
            "image",
            False,
            "the image carries no signature object",
            severity=severity,
            expected="signed",
            actual="unsigned",
            evidence=evidence,
        )
    if binary is None:
        return rows.judge(
            "image.signature",
            "image",
            None if severity == "hard" else True,
            f"{len(signed)} signature object(s); no {con.get('binary')} here to verify them",
            severity=severity,
            expected="verified",
            actual="signed",
            evidence=evidence,
        )
    try:
        proc = subprocess.run(
            [binary, "verify", str(sif.path)],
            capture_output=True,
            text=True,
            timeout=VERIFY_TIMEOUT_S,
            check=False,
        )
        ok, output = proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, output = False, str(exc)
    evidence["verify_output"] = output
    return rows.judge(
        "image.signature",
        "image",
        ok,
        f"{binary} verify: {'ok' if ok else 'failed'}",
        severity=severity,
        expected="verified",
        actual="verified" if ok else "failed",
        evidence=evidence,
    )


def _inside_check(image: Path, labels: dict[str, str], root: Path) -> Check:
    """Proof from inside: the runtime names the image, and the labels Apptainer wrote into it match."""
    env = {k: os.environ.get(k) for k in CONTAINER_ENV if os.environ.get(k)}
    path = root / LABELS_IN_IMAGE
    try:
        seen: dict[str, Any] | None = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        seen = None
    evidence = {
        "env": env,
        "labels_json": str(path),
        "labels_in_root": seen,
        "rootfs": os.environ.get("APPTAINER_STANDIN_ROOTFS"),
    }
    severity = "hard"
    if not env:
        ok, message = (
            False,
            f"container=apptainer but this job runs outside any image ({'/'.join(CONTAINER_ENV)} unset)",
        )
    elif seen is None:
        ok, severity = False, "soft"
        where = next(iter(env.values()))
        message = f"inside {where}, but /{LABELS_IN_IMAGE} is unreadable: cannot confirm the root"
    else:
        ok = {str(k): str(v) for k, v in seen.items()} == labels
        message = (
            f"runs inside the image: /{LABELS_IN_IMAGE} matches the SIF's labels"
            if ok
            else f"/{LABELS_IN_IMAGE} in this root differs from the labels of {image}"
        )
    return rows.judge(
        "image.inside",
        "image",
        ok,
        message,
        severity=severity,
        expected=labels,
        actual=seen,
        evidence=evidence,
    )


def validate(cfg: DictConfig) -> None:
    """At launch: the pins parse, the runtime exists on this machine (else nothing is submitted)."""
    con = _section(cfg)
    if con.get("expect_sha256"):
        try:
            normalize_sha256(con["expect_sha256"], "container.expect_sha256")
        except InputError as exc:
            raise ConfigError("container.expect_sha256", str(exc).split(": ", 1)[-1]) from exc
    if con.get("promotion_record"):
        try:
            read_promotion(con["promotion_record"])
        except InputError as exc:
            raise ConfigError("container.promotion_record", str(exc)) from exc
    required_labels(con)
    if con.get("kind") == "apptainer" and shutil.which(str(con.get("binary") or "apptainer")) is None:
        raise ConfigError(
            "container.binary",
            f"{con.get('binary')!r} is not on PATH here: container=apptainer needs apptainer or singularity "
            "on the login and compute nodes (module load apptainer?), or container=none",
        )


def prepare(cfg: DictConfig) -> None:
    """At launch, in the resolved config: absolute paths for the image and the record (jobs may start in
    another directory)."""
    con = cfg.get("container")
    if con is None:
        return
    with open_dict(con):
        for key in ("image", "promotion_record"):
            if con.get(key):
                con[key] = str(Path(str(con[key])).resolve())


def make_bind_sources(cfg: DictConfig) -> None:
    """The run, audit and checkpoint folders exist before the jobs bind them into the image."""
    if _section(cfg).get("kind") == "apptainer":
        for key in ("run_dir", "audit_dir", "checkpoint_dir"):
            Path(str(cfg[key])).mkdir(parents=True, exist_ok=True)
