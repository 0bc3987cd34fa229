"""Reuse you can trust: a stage is reused from the audit history only on proven-identical inputs, from a
twin that proves itself, and the record says it is the past.

Planner cases run `build_plan` in-process on real files (the stages are the real registered ones, or a
cheap stand-in with the same input declaration); the twins are written by `audit.write_record`, the
path every gate takes, then damaged on disk as a person with write access to the folder would.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline import stages
from pipeline.errors import ConfigError, InputError
from pipeline.inputs import Input
from pipeline.record import audit, hashcache, history, integrity
from pipeline.record.fingerprint import Fingerprinter
from pipeline.record.hashcache import HashCache
from pipeline.record.records import Check, GateRecord, StageResult
from pipeline.record.runfolder import RunFolder
from pipeline.run import input_checks as launch_inputs
from pipeline.run.plan import build_plan, history_notes, write_reused
from pipeline.stages import Stage
from pipeline.stages.teacher_forced.evaluate import _provenance

REPO = Path(__file__).resolve().parents[2]


def noop(cfg, ctx):
    return StageResult.from_checks(ctx.stage, [])


REGISTRY = {
    "container_check": Stage("container_check", noop, after=()),
    "reader": Stage("reader", noop, inputs=("model",)),
}


def config(tmp_path: Path, **extra):
    base = OmegaConf.load(REPO / "pipeline" / "conf" / "config.yaml")
    base = OmegaConf.masked_copy(base, ["resources_default", "skip", "reuse", "audit", "fingerprint"])
    section = {"stage": {"name": "full"}, "stages": {}, "container": {"image": None}, "run_id": "now"}
    section |= {"model": {"path": str(tmp_path / "model")}, "training": {"path": None}}
    section |= {"dataset": {"path": None}, "audit_dir": str(tmp_path / "audit")}
    (tmp_path / "audit").mkdir(exist_ok=True)
    return OmegaConf.merge(base, section, extra)


def checkpoint(folder: Path, size: int = 3 * 2**20, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = bytes((i * 7 + seed) % 251 for i in range(256)) * (size // 256)
    (folder / "model.safetensors").write_bytes(data)
    (folder / "config.json").write_text('{"type": "act"}')
    return folder / "model.safetensors"


def plan(cfg, registry=REGISTRY) -> dict:
    return {j.name: j for j in build_plan(cfg, registry, RunFolder(Path(str(cfg.audit_dir)).parent / "run"))}


def clear_record(run_id: str, results: list[StageResult], created: str = "2026-12-01T00:00:00+00:00"):
    return GateRecord(
        run_id=run_id,
        created=created,
        verdict="pass",
        gate="clear",
        reasons=(),
        stages=tuple(results),
        sources={
            "model": {"name": "m", "path": None},
            "dataset": {"name": "d", "path": None},
            "training": {"path": None},
            "container": {"kind": "none"},
        },
        fingerprints={r.stage: r.fingerprints for r in results},
    )


def result(stage: str, prints: dict[str, str], message: str = "fine", **fields) -> StageResult:
    row = Check(id=f"{stage}.x", stage=stage, category="units", feature="f", verdict="match", message=message)
    return StageResult.from_checks(stage, [row], fingerprints=prints, **fields)


def seal_run(cfg, run_id: str, key: bytes | None = None, **fields) -> Path:
    """The record an earlier clear gate wrote with these exact inputs."""
    prints = plan(cfg)["reader"].fingerprints
    folder = Path(str(cfg.audit_dir))
    created = f"2026-12-0{len(list(folder.glob('*.json'))) + 1}T00:00:00+00:00"  # one day per record
    record = clear_record(run_id, [result("reader", prints, **fields)], created)
    return audit.write_record(folder, record, key=key).with_suffix(".json")


# --- 1. one declaration: launch checks and fingerprints come from it ----------------------------------


def test_a_nested_input_declared_by_a_plugin_is_checked_and_fingerprinted(tmp_path, plugin_stages):
    registry = stages.load(["preflight_nested_input_stage"])
    nested = {"container_check": Stage("container_check", noop, after=()), "nested": registry["nested"]}
    weight = tmp_path / "w.bin"
    weight.write_bytes(b"a" * 100)
    cfg = config(tmp_path, stages={"nested": {"weights": [{"path": str(weight)}]}})
    before = plan(cfg, nested)["nested"].fingerprints["stages.nested.weights[0].path"]
    weight.write_bytes(b"b" * 100)
    assert plan(cfg, nested)["nested"].fingerprints["stages.nested.weights[0].path"] != before
    missing = config(tmp_path, stages={"nested": {"weights": [{"path": str(tmp_path / "gone.bin")}]}})
    with pytest.raises(InputError) as info:
        launch_inputs.check_stage(missing, registry["nested"])
    assert str(info.value).startswith("stages.nested.weights[0].path: ")


def test_every_built_in_stage_declares_the_paths_nested_in_its_section():
    keys = {name: {i.key for i in s.declared_inputs} for name, s in stages.load().items()}
    assert "stages.teacher_forced.models[*].path" in keys["teacher_forced"]
    assert "stages.teacher_forced.models[*].manifest" in keys["teacher_forced"]
    assert "stages.determinism.reload.dataset" in keys["determinism"]
    assert "known_good.path" in keys["contract"]
    assert {"release.path", "cache.path"} <= keys["render_cache"]
    assert "teacher_forced" not in (REPO / "pipeline" / "run" / "input_checks.py").read_text()


# --- 2. fingerprints that prove identity ---------------------------------------------------------------


def test_a_teacher_forced_model_resaved_at_its_path_reruns_and_its_pin_blocks(tmp_path):
    weights = checkpoint(tmp_path / "tf")
    pin = hashlib.sha256(weights.read_bytes()).hexdigest()
    spec = {"name": "policy", "path": str(weights), "loader": "x:y", "expected_sha256": pin}
    data = tmp_path / "data"  # teacher_forced runs only with a dataset to score on (its `needs`)
    (data / "meta").mkdir(parents=True)
    (data / "meta" / "info.json").write_text('{"codebase_version": "v3.0", "features": {}}')
    cfg = config(tmp_path, stages={"teacher_forced": {"models": [spec]}}, dataset={"path": str(data)})
    registry = {
        "container_check": REGISTRY["container_check"],
        "teacher_forced": stages.get("teacher_forced"),
    }
    first = plan(cfg, registry)["teacher_forced"]
    assert first.basis["stages.teacher_forced.models[0].path"].startswith("sha256 of 1 file")
    record = clear_record("earlier", [result("teacher_forced", first.fingerprints)])
    audit.write_record(tmp_path / "audit", record)
    assert plan(cfg, registry)["teacher_forced"].reused_from == "earlier"  # unchanged: reused
    checkpoint(tmp_path / "tf", seed=1)  # re-merged in place, pin left as it was
    again = plan(cfg, registry)["teacher_forced"]
    assert not again.reused
    row, ok = _provenance(_Spec(**spec), False)
    assert ok is False and row.verdict == "mismatch" and row.severity == "hard"


@dataclasses.dataclass
class _Spec:
    name: str
    path: str
    loader: str
    expected_sha256: str
    manifest: str | None = None


def test_a_tensor_rewritten_in_place_with_same_size_edges_and_mtime_reruns(tmp_path):
    weights = checkpoint(tmp_path / "model")
    cfg = config(tmp_path)
    seal_run(cfg, "earlier")
    assert plan(cfg)["reader"].reused_from == "earlier"
    info = weights.stat()
    with open(weights, "r+b") as handle:  # one tensor in the middle; first and last MiB untouched
        handle.seek(info.st_size // 2)
        handle.write(b"\xff" * 4096)
    os.utime(weights, ns=(info.st_atime_ns, info.st_mtime_ns))  # mtime set back; ctime cannot be
    assert not plan(cfg)["reader"].reused


def test_an_unchanged_checkpoint_is_hashed_from_the_cache_and_a_rewrite_misses_it(tmp_path, monkeypatch):
    monkeypatch.setattr(hashcache, "RACY_NS", 0)  # the files are seconds old; the rule is tested below
    weights = checkpoint(tmp_path / "model")
    audit_dir = tmp_path / "audit"
    audit_dir.mkdir()
    first = HashCache(audit_dir)
    value = Fingerprinter(first).path(weights.parent, whole=True).value
    first.save()
    assert first.misses == 2 and first.bytes_read > 3 * 2**20 - 1
    second = HashCache(audit_dir)
    assert Fingerprinter(second).path(weights.parent, whole=True).value == value
    assert second.hits == 2 and second.bytes_read == 0
    with open(weights, "r+b") as handle:
        handle.seek(100)
        handle.write(b"\x00")
    third = HashCache(audit_dir)
    assert Fingerprinter(third).path(weights.parent, whole=True).value != value and third.misses == 1


def test_a_file_changed_within_the_racy_window_is_not_cached(tmp_path):
    weights = checkpoint(tmp_path / "model")  # just written: younger than RACY_NS
    cache = HashCache(tmp_path)
    Fingerprinter(cache).path(weights, whole=True)
    assert cache.fresh == {}


def test_a_cache_entry_planted_without_the_key_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setattr(hashcache, "RACY_NS", 0)
    key = b"k" * 32
    weights = checkpoint(tmp_path / "model")
    info = weights.stat()
    forged = {f"{info.st_dev}:{info.st_ino}": [info.st_size, info.st_mtime_ns, info.st_ctime_ns, "00" * 32]}
    (tmp_path / hashcache.CACHE_FILE).write_text(json.dumps({"version": 1, "entries": forged}))
    assert HashCache(tmp_path).sha256(weights, info) == "00" * 32  # no key: the folder is trusted
    assert HashCache(tmp_path, key).sha256(weights, info) == hashlib.sha256(weights.read_bytes()).hexdigest()


def test_a_large_data_file_is_taken_by_identity_and_sampled_blocks_and_said_so(tmp_path):
    data = tmp_path / "data"
    checkpoint(data, size=2 * 2**20)
    found = Fingerprinter(whole_file_bytes=2**20).path(data)
    assert found.basis == "sha256 of 1 file, 15 B; 1 file (2.1 MB) by identity + sampled blocks"


# --- 4. a tamper-evident history --------------------------------------------------------------------


def test_a_twin_edited_by_hand_to_clear_is_ignored_and_named(tmp_path):
    checkpoint(tmp_path / "model")
    cfg = config(tmp_path)
    prints = plan(cfg)["reader"].fingerprints
    row = Check(id="reader.x", stage="reader", category="units", feature="f", verdict="mismatch")
    blocked = dataclasses.replace(
        clear_record("blocked-run", [StageResult.from_checks("reader", [row], fingerprints=prints)]),
        gate="blocked",
        verdict="mismatch",
        reasons=("reader.x: mismatch",),
    )
    twin = audit.write_record(tmp_path / "audit", blocked).with_suffix(".json")
    data = json.loads(twin.read_text())
    data.update(gate="clear", verdict="pass", reasons=[])
    data["stages"][0]["checks"][0]["verdict"] = "match"
    data["stages"][0]["status"] = "pass"
    twin.write_text(json.dumps(data))
    assert not plan(cfg)["reader"].reused
    assert f"history entry {twin.name} ignored: edited after it was written" in " ".join(history_notes(cfg))


def test_with_a_key_a_forged_twin_is_ignored_and_a_signed_one_reused(tmp_path):
    checkpoint(tmp_path / "model")
    key_file = tmp_path / "team.key"
    key_file.write_text("a-team-secret-of-32-characters!!\n")
    cfg = config(tmp_path, audit={"key_file": str(key_file)})
    forged = seal_run(cfg, "forged")  # right fingerprints, sealed by someone without the key
    assert not plan(cfg)["reader"].reused
    assert any(forged.name in n and "no HMAC for audit.key_file" in n for n in history_notes(cfg))
    seal_run(cfg, "signed", key=integrity.load_key(key_file))
    assert plan(cfg)["reader"].reused_from == "signed"


def test_a_deleted_middle_record_is_a_gap_named_by_the_chain(tmp_path):
    checkpoint(tmp_path / "model")
    cfg = config(tmp_path)
    first, middle, last = (seal_run(cfg, name) for name in ("one", "twoo", "three"))
    assert [t.problem for t in history.verify(tmp_path / "audit")] == [None, None, None]
    middle.unlink()
    problems = {t.path.name: t.problem for t in history.verify(tmp_path / "audit")}
    assert problems[first.name] is None
    assert problems[last.name].startswith("chain gap: the record written before it")


def test_an_inserted_record_forks_the_chain(tmp_path):
    checkpoint(tmp_path / "model")
    cfg = config(tmp_path)
    first = seal_run(cfg, "one")
    head = history.chain_head(tmp_path / "audit")
    seal_run(cfg, "twoo")
    record = clear_record("inserted", [result("reader", plan(cfg)["reader"].fingerprints)])
    inserted = tmp_path / "audit" / "2026-12-01_m_d_inserted_audit.json"
    inserted.write_text(json.dumps(history.seal(record.to_dict(), head, None)))
    problems = {t.path.name: t.problem for t in history.verify(tmp_path / "audit")}
    assert problems[first.name] is None and "chain fork" in problems[inserted.name]


def test_verify_history_command_lists_every_untrusted_twin(tmp_path):
    checkpoint(tmp_path / "model")
    cfg = config(tmp_path)
    seal_run(cfg, "one")
    ok = subprocess.run(
        [sys.executable, "-m", "pipeline.status", "--verify-history", str(tmp_path / "audit")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (tmp_path / "audit" / "2026-12-02_m_d_hand_audit.json").write_text("{}")
    bad = subprocess.run(
        [sys.executable, "-m", "pipeline.status", "--verify-history", str(tmp_path / "audit")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 3 and "2026-12-02_m_d_hand_audit.json: carries no digest" in bad.stdout


# --- 3, 5, 6. the past labelled, evidence that travels, opting out ------------------------------------


def test_a_reused_result_names_its_run_and_brings_its_plots_without_the_run_folder(tmp_path):
    checkpoint(tmp_path / "model")
    cfg = config(tmp_path)
    plot = tmp_path / "old-run" / "artifacts" / "curve.png"
    plot.parent.mkdir(parents=True)
    plot.write_bytes(b"\x89PNG fake plot bytes")
    seal_run(cfg, "earlier", artifacts={"curve": str(plot)})
    plot.unlink()  # the earlier run folder is gone; the record's own copy is what remains
    jobs = list(plan(cfg).values())
    folder = RunFolder(tmp_path / "new-run")
    write_reused(folder, jobs)
    reused = folder.load_result("reader")
    assert Path(reused.artifacts["curve"]).read_bytes() == b"\x89PNG fake plot bytes"
    assert reused.checks[0].message.startswith("[measured in run earlier on 2026-12-01]")
    assert reused.provenance["reused_compared"]["model"].startswith("sha256 of 2 files")
    markdown = audit.render_markdown(clear_record("new", [reused]), tmp_path / "audit")
    assert "its rows were measured in run `earlier`" in markdown


def test_a_relaunch_the_same_day_never_overwrites_the_earlier_record(tmp_path):
    record = clear_record("same", [])
    first = audit.write_record(tmp_path / "audit", record)
    second = audit.write_record(tmp_path / "audit", record)
    assert first != second and first.exists() and second.name.endswith("same-2_audit.md")


@pytest.mark.parametrize("setting", [{"reuse": "off"}, {"stages": {"reader": {"reuse": False}}}])
def test_reuse_off_and_a_stage_opting_out_rerun(tmp_path, setting):
    checkpoint(tmp_path / "model")
    cfg = config(tmp_path)
    seal_run(cfg, "earlier")
    assert plan(cfg)["reader"].reused
    assert not plan(config(tmp_path, **setting))["reader"].reused


def test_a_key_file_that_is_too_short_is_a_config_error(tmp_path):
    short = tmp_path / "k"
    short.write_text("short")
    with pytest.raises(ConfigError) as info:
        integrity.load_key(short)
    assert info.value.key == "audit.key_file"


# --- issue 26: no bad file in a shared audit folder can hang, crash or fool a launch -----------------


def test_a_fifo_a_device_link_deep_json_and_an_outside_link_are_skipped_with_a_line(tmp_path):
    checkpoint(tmp_path / "model")
    cfg = config(tmp_path)
    prints = plan(cfg)["reader"].fingerprints
    outside = audit.write_record(tmp_path / "elsewhere", clear_record("x", [result("reader", prints)]))
    folder = tmp_path / "audit"
    os.mkfifo(folder / "2026-12-03_m_d_fifo_audit.json")
    (folder / "2026-12-03_m_d_zero_audit.json").symlink_to("/dev/zero")
    (folder / "2026-12-03_m_d_deep_audit.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "2026-12-03_m_d_outside_audit.json").symlink_to(outside.with_suffix(".json"))
    script = (
        "import sys; from pipeline.record import history;"
        f"print('\\n'.join(history.ignored(history.verify({str(folder)!r}))))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any("fifo_audit.json ignored: unreadable: is a FIFO" in line for line in lines)
    assert any(
        "zero_audit.json ignored: unreadable: a symlink to /dev/zero, outside" in line for line in lines
    )
    assert any("deep_audit.json ignored: unreadable: JSON nested deeper" in line for line in lines)
    assert any("outside_audit.json ignored: unreadable: a symlink to" in line for line in lines)
    assert not plan(cfg)["reader"].reused


def test_the_key_and_cache_readers_refuse_fifos_and_devices(tmp_path):
    os.mkfifo(tmp_path / "key")
    with pytest.raises(ConfigError, match="FIFO"):
        integrity.load_key(tmp_path / "key")
    with pytest.raises(ConfigError, match="character device"):
        integrity.load_key("/dev/zero")
    os.mkfifo(tmp_path / hashcache.CACHE_FILE)
    assert HashCache(tmp_path).entries == {}  # ignored with a logged line, never a hang


def test_an_input_declaration_rejects_a_malformed_key():
    with pytest.raises(ValueError):
        Input("stages.x.models[0].path")


def test_the_timeline_rebuild_skips_a_fifo_and_a_device_link(tmp_path):
    audit.write_record(tmp_path, clear_record("fine", []))
    os.mkfifo(tmp_path / "2026-12-03_m_d_fifo_audit.json")
    (tmp_path / "2026-12-03_m_d_zero_audit.json").symlink_to("/dev/zero")
    script = f"from pipeline.record import audit; audit.rebuild_timeline({str(tmp_path)!r})"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / audit.TIMELINE).read_text()
    assert "fifo_audit.json" in text and "zero_audit.json" in text and "`fine`" in text


def test_fingerprints_never_open_a_fifo_or_read_a_device(tmp_path):
    folder = tmp_path / "dataset"
    folder.mkdir()
    os.mkfifo(folder / "pipe")
    (folder / "zero").symlink_to("/dev/zero")  # a link out of the input: its text is its fingerprint
    script = (
        "from pipeline.record.fingerprint import Fingerprinter;"
        f"print(Fingerprinter().path({str(folder)!r}, whole=True).basis);"
        f"print(Fingerprinter().path({str(folder / 'pipe')!r}, whole=True).basis);"
        "print(Fingerprinter().path('/dev/zero', whole=True).basis)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    what = "not a regular file (by kind or link text, never opened)"
    assert done.stdout.splitlines() == [f"2 {what}", f"1 {what}", f"1 {what}"]
