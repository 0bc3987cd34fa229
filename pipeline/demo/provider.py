"""The embedded demo as one input provider: it fills the configuration before planning, in one place.

A record is about the user's inputs. So the demo fills anything only when the launch named no input at
all (no stage's declared path, no key a stage `needs`, e.g. `stages.determinism.train_cmd`); then it
fills, for the stages selected, every key a user would set: the model, dataset and training paths,
render_cache's release and cache (and the sizes of that cache), teacher_forced's model list, the
determinism stage's smoke trainer and reload loader, and `demo=faulty`'s planted faults where those
stages read them (determinism's `fault`, a stale promotion record for the demo's image). No stage or
reader knows the demo: they read what is filled here as they would read a user's keys.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from pipeline.errors import InputError
from pipeline.record.runfolder import demo_dir
from pipeline.run.plan import selected_stages
from pipeline.stages import Stage, is_set

NAME = "demo"
TRAINER = "pipeline.demo.reference_trainer"
RELOAD_LOADER = "pipeline.demo.reload:load_demo"
SECTIONS = ("model", "dataset", "training")
NAME_CONTRACT = "contract"


def named_inputs(cfg: Any, registry: Mapping[str, Stage]) -> list[str]:
    """Every input key this launch set, over all registered stages (plugins too): a declared path, or a
    key a stage needs to run. Any one of them means the user's inputs, and no demo."""
    found: set[str] = set()
    for stage in registry.values():
        for item in stage.declared_inputs:
            found.update(key for key, path in item.resolve(cfg) if path is not None)
        found.update(k for need in stage.needs for k in need.split("|") if is_set(cfg, k))
    return sorted(found)


def provide(cfg: DictConfig, registry: Mapping[str, Stage]) -> bool:
    """Fill the demo's inputs into the resolved `cfg` for the selected stages, when no input was named
    and `cfg.demo` is set; returns whether it did."""
    if not cfg.get("demo") or named_inputs(cfg, registry):
        return False
    chosen = selected_stages(cfg, registry)
    names = {s.name for s in chosen}
    read = {i.key.split(".")[0] for s in chosen for i in s.declared_inputs}
    wanted = [k for k in SECTIONS if k in read]
    worker = _render_cache_worker(cfg) if "render_cache" in names and wanted else None
    with open_dict(cfg):
        try:
            if wanted:
                _main_demo(cfg, names, wanted)
        except BaseException:
            if worker is not None:
                worker.stop()
            raise
        if "render_cache" in names:
            _render_cache(cfg, worker)
        pin_image(cfg)
    return True


def _main_demo(cfg: DictConfig, names: set[str], wanted: list[str]) -> None:
    """The demo's model, dataset and training config, and what the selected stages read beside them."""
    from pipeline import demo

    built = demo.ensure(cfg.demo, demo_dir(cfg.output_root))
    for key in wanted:
        cfg[key].path, cfg[key].name = str(built[key]), NAME
    if NAME_CONTRACT in names and not (cfg.get("deploy") or {}).get("command"):
        _deploy(cfg)
    if "teacher_forced" in names:
        _teacher_forced(cfg, Path(built["dataset"]).parent)
    if "determinism" in names:
        _determinism(cfg)


def _deploy(cfg: DictConfig) -> None:
    """The demo's D: the OGBench env its policy runs in, as a D file in `deploy.path`."""
    from pipeline.demo import deploy_env

    demo = OmegaConf.to_container(cfg.demo, resolve=True)
    assert isinstance(demo, dict)
    if cfg.get("deploy") is None:
        cfg.deploy = {}
    cfg.deploy.path = str(deploy_env.write(demo, demo_dir(cfg.output_root)))


def _render_cache_settings(cfg: DictConfig) -> dict[str, Any]:
    section = OmegaConf.to_container(cfg.demo.get("render_cache") or OmegaConf.create({}), resolve=True)
    assert isinstance(section, dict)
    return {**section, "variant": cfg.demo.get("variant", "default")}


class _Worker:
    """The render_cache demo built by `python -m pipeline.demo.render_cache` while this process builds
    the main demo: the two builds share nothing and each is mostly one core's work (oracle rollouts, GL
    rendering), so on two cores they overlap instead of adding up. Its output goes to a file (two rich
    bars on one terminal garble each other); `wait` returns it when the worker failed, and the build is
    then redone in this process, where its error is raised as before."""

    def __init__(self, argv: list[str]) -> None:
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def wait(self) -> str:
        try:
            code = self.proc.wait()
            self.log.seek(0)
            return "" if code == 0 else self.log.read()[-2000:].decode(errors="replace")
        finally:
            self.log.close()


def _render_cache_worker(cfg: DictConfig) -> _Worker | None:
    from pipeline.demo import render_cache as render_demo

    settings, root = _render_cache_settings(cfg), demo_dir(cfg.output_root)
    if render_demo.built(settings, root):
        return None
    print("building the render_cache demo (once) in a process of its own, beside the demo", flush=True)
    return _Worker([sys.executable, "-m", "pipeline.demo.render_cache", json.dumps(settings), str(root)])


def _render_cache(cfg: DictConfig, worker: _Worker | None = None) -> None:
    """The render_cache demo's release and cache, and its budgets and sizes in stages.render_cache."""
    from pipeline.demo import render_cache as render_demo

    settings = _render_cache_settings(cfg)
    if worker is not None and (failed := worker.wait()):
        print(f"render_cache demo worker failed, building it here:\n{failed}", file=sys.stderr, flush=True)
    built = render_demo.ensure(settings, demo_dir(cfg.output_root))
    for key in ("release", "cache"):
        cfg[key] = {"path": str(built[key])}
    cfg.stages.render_cache = OmegaConf.merge(cfg.stages.render_cache, render_demo.stage_overrides(settings))


def _teacher_forced(cfg: DictConfig, root: Path) -> None:
    """The demo's models in stages.teacher_forced (and its baseline, unless one is configured)."""
    models, baseline = teacher_forced_models(root)
    tf = cfg.stages.teacher_forced
    tf.models = models
    if not tf.get("baseline"):
        tf.baseline = baseline


def teacher_forced_models(root: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The demo's models (its `teacher_forced/models.json` under the demo folder `root`), paths made
    absolute and kept inside `root`, and the baseline's name."""
    from pipeline.demo.marker import TEACHER_FORCED as FOLDER

    listing = root / FOLDER / "models.json"
    try:
        data = json.loads(listing.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{listing}: unreadable demo model list: {exc}", path=listing) from exc
    models = []
    for i, raw in enumerate(data.get("models") or []):
        spec = dict(raw)
        for attr in ("path", "manifest"):
            if spec.get(attr):
                full = (listing.parent / spec[attr]).resolve()
                if not full.is_relative_to(root.resolve()):
                    raise InputError(
                        f"{listing}: models[{i}].{attr} {spec[attr]!r} leaves {root}",
                        path=listing,
                        field=attr,
                    )
                spec[attr] = str(full)
        models.append(spec)
    return models, data.get("baseline")


def _determinism(cfg: DictConfig) -> None:
    """The demo's reference trainer as the smoke training, its reload, and demo=faulty's unseeded shuffle."""
    det = cfg.stages.determinism
    det.train_cmd = [
        "{python}", "-m", TRAINER, "--seed", "{seed}", "--steps", "{steps}", "--out", "{out}",
        "--dataset", "{dataset}", "--model", "{model}", "--training", "{training}",
        "--fault", "{fault}", "--save-normalization-stats", "{save_normalization_stats}",
    ]  # fmt: skip
    if not det.reload.get("loader"):
        det.reload.loader = RELOAD_LOADER
    if cfg.demo.get("variant") == "faulty" and det.get("fault", "none") == "none":
        det.fault = "unseeded_shuffle"


def pin_image(cfg: DictConfig) -> None:
    """The demo's own image (`python -m pipeline.demo image`) pinned by its promotion record, or, with
    demo=faulty's `stale_promotion`, by the record of an image promoted before a rebuild."""
    from pipeline.demo.image import IMAGE_NAME, record_of

    con = cfg.get("container")
    if not con or not con.get("image") or con.get("promotion_record") or con.get("expect_sha256"):
        return
    image = Path(str(con.image))
    if ((cfg.get("demo") or {}).get("faults") or {}).get("stale_promotion"):
        con.promotion_record = str(stale_promotion(image, demo_dir(cfg.output_root)))
    elif image.name == IMAGE_NAME and record_of(image).is_file():
        con.promotion_record = str(record_of(image))


def stale_promotion(image: Path, folder: Path) -> Path:
    """demo=faulty: the record of an image promoted under the same name, before it was rebuilt."""
    from pipeline.readers.promotion import write_promotion
    from pipeline.readers.sif import read_sif

    try:
        labels = read_sif(image).labels()
    except InputError:
        labels = {}
    record = {
        "image": str(image),
        "sha256": hashlib.sha256(
            b"demo=faulty: the image promoted before the rebuild " + bytes(image)
        ).hexdigest(),
        "labels": labels,
        "date": "2026-01-01",
        "who": "demo=faulty (planted: the image was rebuilt after promotion)",
    }
    return write_promotion(record, folder / "stale-promotion.yaml")
