"""The demo is one input provider, used only when a launch names no input (issue 31, item 1).

A user's record must be about the user's inputs: no stage reads the demo, a stage whose inputs were not
given is a `skipped` row naming the keys that would run it (never a pass), `stage=<that stage>` alone is
exit 2 naming them, and the record is named after the model and dataset it judged.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tokenize
import xml.etree.ElementTree as ET
from pathlib import Path

from omegaconf import OmegaConf

from pipeline import stages
from pipeline.demo.provider import named_inputs
from pipeline.record.audit import path_name
from tests.conftest import DemoCache, gate_of, run_dir_of
from tests.in_process_launch import launch_here

PACKAGE = Path(__file__).resolve().parents[2] / "pipeline"
# what reading the demo looks like in code: its package, its config section, its variant or its files
DEMO_CODE = re.compile(r"pipeline\.demo|\.demo\b|[\"']demo[\"']|demo_variant|DEMO_|models\.json|faulty")


def code_tokens(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every name and string of a module that is not a comment or a docstring."""
    found, previous = [], tokenize.NEWLINE  # a module's first string is its docstring
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        docstring = tok.type == tokenize.STRING and previous in (
            tokenize.INDENT,
            tokenize.NEWLINE,
            tokenize.NL,
        )
        if tok.type in (tokenize.NAME, tokenize.STRING, tokenize.OP) and not docstring:
            found.append((tok.start[0], tok.string))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            previous = tok.type
    return found


def test_no_stage_or_reader_reads_the_demo():
    hits = []
    for folder in ("stages", "readers"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            tokens = code_tokens(path)
            text = "".join(t for _, t in tokens)
            for match in DEMO_CODE.finditer(text):
                hits.append(
                    f"{path.relative_to(PACKAGE)}: {text[max(0, match.start() - 40) : match.end() + 20]}"
                )
    assert not hits, "\n".join(hits)


def test_any_named_input_turns_the_demo_off():
    registry = stages.load()
    cfg = OmegaConf.create(
        {"model": {"path": None}, "dataset": {"path": None}, "training": {"path": None}, "known_good": None,
         "release": {"path": None}, "cache": {"path": None},
         "stages": {"teacher_forced": {"models": [], "sample_manifest": None},
                    "determinism": {"train_cmd": [], "reload": {"dataset": None}}}}
    )  # fmt: skip
    assert named_inputs(cfg, registry) == []
    for key, value in (
        ("release.path", "/r"),
        ("stages.determinism.train_cmd", ["python", "t.py"]),
        ("stages.teacher_forced.models", [{"name": "m", "path": "/m"}]),
        ("model.path", "/m"),
    ):
        one = OmegaConf.merge(cfg, OmegaConf.from_dotlist([]))
        OmegaConf.update(one, key, value, merge=False)
        assert named_inputs(one, registry), key


def test_a_record_is_named_after_the_paths_it_judged():
    assert path_name("/runs/act_so101/checkpoints/000020/pretrained_model") == "act_so101-000020"
    assert path_name("/data/lerobot/so101_pick") == "so101_pick"
    assert path_name("/x/act_trained/pretrained_model") == "act_trained"


def test_a_stage_alone_without_its_inputs_is_exit_2_naming_the_keys(tmp_path, demo_cache: DemoCache):
    model = demo_cache.seed(tmp_path / "seed") / "model"
    proc = launch_here(tmp_path, "stage=render_cache", "launcher=local", f"model.path={model}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "release.path" in out and "cache.path" in out and len(out.strip().splitlines()) == 1, out
    assert not (tmp_path / "preflight").exists()  # nothing built, nothing queued


def test_a_users_inputs_get_skipped_rows_and_no_demo_anywhere(tmp_path, demo_cache: DemoCache):
    """The demo's own files copied where a user keeps theirs (with the demo's teacher-forced model list
    still beside the dataset): no release/cache, no train_cmd, a model type no shipped loader reads."""
    mine = tmp_path / "mine"
    shutil.copytree(demo_cache.seed(tmp_path / "seed"), mine)
    cwd = tmp_path / "run"
    cwd.mkdir()
    proc = launch_here(
        cwd,
        "stage=full",
        "launcher=local",
        "skip=[checkpoint_storage]",
        f"model.path={mine / 'model'}",
        f"dataset.path={mine / 'dataset'}",
        f"training.path={mine / 'training.yaml'}",
        "gate.junit=gate.xml",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "render_cache skipped: no input to judge; set release.path, cache.path" in out
    assert "determinism skipped: no input to judge; set stages.determinism.train_cmd" in out
    run_dir = run_dir_of(cwd, proc)
    gate = gate_of(run_dir)
    by_stage = {s["stage"]: s for s in gate["stages"]}
    assert {n: s["status"] for n, s in by_stage.items() if s["status"] == "skipped"} == {
        "render_cache": "skipped",
        "determinism": "skipped",
        "teacher_forced": "skipped",  # demo_mlp: no shipped loader; models.json beside the data unread
    }
    assert by_stage["render_cache"]["provenance"]["needs"] == ["release.path", "cache.path"]
    assert "stages.teacher_forced.models" in by_stage["teacher_forced"]["provenance"]["reason"]
    assert not any(by_stage[n]["checks"] for n in ("render_cache", "determinism", "teacher_forced"))
    assert gate["gate"] == "clear" and by_stage["contract"]["status"] in ("pass", "warn")
    record = next((cwd / "audit_logs").glob("*_audit.md"))
    text = record.read_text()
    assert "_mine_mine_" in record.name, record.name  # "model", "dataset": generic names, skipped
    assert "preflight/demo" not in text and "demo on demo" not in text
    assert re.search(r"\| render\\?_cache \| skipped · .*release\.path, cache\.path", text)
    junit = ET.parse(cwd / "gate.xml").getroot()
    suite = next(s for s in junit.iter("testsuite") if s.get("name") == "render_cache")
    assert suite.get("skipped") == "1" and suite.find("testcase/skipped") is not None
    status = subprocess.run(
        [sys.executable, "-m", "pipeline.status", run_dir.name],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False, env={"COLUMNS": "200", **_env()},
    )  # fmt: skip
    line = next(x for x in status.stdout.splitlines() if " render_cache " in x or "render_cache" in x)
    assert "SKIPPED" in line and "pass" not in line, status.stdout


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def test_model_path_is_scored_with_the_loader_its_config_names(tmp_path):
    """A LeRobot policy type -> load_lerobot (exit 2 at launch where lerobot is missing); another type
    names no loader: the stage is skipped, naming stages.teacher_forced.models."""
    import importlib.util

    from pipeline.stages.teacher_forced import LEROBOT_LOADER, model_loader, model_specs

    act, mine = tmp_path / "act", tmp_path / "mine"
    for folder, kind in ((act, "act"), (mine, "my_mlp")):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"type": kind}))
    assert model_loader(act) == LEROBOT_LOADER and model_loader(mine) is None
    cfg = OmegaConf.create({"model": {"path": str(act), "name": None}})
    (spec,) = model_specs(cfg, stages.get("teacher_forced").config())
    assert spec.loader == LEROBOT_LOADER and spec.path == str(act)
    given = {"model": {"path": str(mine)}, "dataset": {"path": "/d"}, "stages": {"teacher_forced": {}}}
    missing = stages.missing_keys(stages.get("teacher_forced"), OmegaConf.create(given))
    assert missing and missing[0].startswith("stages.teacher_forced.models")
    if importlib.util.find_spec("lerobot") is None:
        from tests.malformed.triple import make_triple

        data = make_triple(tmp_path / "triple").dataset
        proc = launch_here(
            tmp_path, "stage=teacher_forced", "launcher=local", f"model.path={act}", f"dataset.path={data}"
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "model.path" in proc.stdout and "['lerobot']" in proc.stdout, proc.stdout


def test_the_render_cache_worker_reports_its_failure_and_is_skipped_once_built(tmp_path):
    """The render_cache demo's build in a process of its own: a worker that fails hands back its output
    (the provider then builds in-process, where the error is raised as before), and a built variant
    starts no worker."""
    from pipeline.demo import provider
    from pipeline.demo import render_cache as render_demo

    failing = provider._Worker(
        [sys.executable, "-c", "import sys; print('planted worker failure'); sys.exit(3)"]
    )
    assert "planted worker failure" in failing.wait()
    assert provider._Worker([sys.executable, "-c", "pass"]).wait() == ""
    settings = {"variant": "default"}
    folder = tmp_path / "render_cache-default"
    folder.mkdir()
    assert not render_demo.built(settings, tmp_path)
    digest = render_demo.digest(render_demo.settings(settings))
    (folder / render_demo.MARKER).write_text(json.dumps({"digest": digest}))
    assert render_demo.built(settings, tmp_path)
