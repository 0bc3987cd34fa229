"""A, B and C against D, where the trained policy will run: the rows `contract.deploy.<place>.<check>`.

What goes wrong there is found after hours of GPU time, or never: lerobot-train evaluates in its env only
at the first `eval_freq` step (a camera renamed for the dataset but not for the env fails there), and
lerobot itself compares camera key sets only, and only as subsets (`validate_visual_features_consistency`).
A policy trained on 480x640 frames and deployed on 720p cameras, a 30 fps dataset played at 15 fps, a
rename map that sends the wrist camera's frames to the front input: each acts on the wrong thing, and the
usual result is a quiet "0 % success". So for every place D the launch names (`readers.deploy`), each
input the policy reads (in the policy's keys, after each side's rename map) is judged against what D
provides there, with the training frames (C) and the policy's spec (A, B) in the same row.

Hard where the run or the deployment will crash or act on the wrong thing; soft where D cannot tell (a
robot type whose motors are not known here); an `error` where D names a value lerobot refuses (a rate of
0, a camera 0 pixels wide, an empty env type). No D, no row.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.inputs import Input
from pipeline.readers import deploy as reader
from pipeline.readers.base import Feature
from pipeline.readers.deploy import Deployment, Provided
from pipeline.record.records import Check, Rows
from pipeline.stages.contract.rows import DECLARES_INPUTS, NAME, Sources, chw, provider

ROWS = Rows(NAME, "layout")
MAX_LISTED = 24  # keys one row names (10,000 cameras made a 15 MB record): the first ones and a count
# what D is read from: a D file, and the launch's copy of the lines that name D (the training line's
# `--env.*` flags and the deploy line), so that another D is another fingerprint and never a reused result
DEPLOY_INPUTS = (Input("deploy.path", "file", whole=True), Input("deploy.lines", "optional", whole=True))
INPUT_ROLES = ("image", "state", "env")
# lerobot 0.4.4 policy types that resize every camera to a size of their own before the model (smolvla's
# resize_imgs_with_padding, pi0/pi05's image_resolution, ...): a size D changes is mended, an aspect ratio
# is not (padding or stretching shows the scene otherwise than in training)
RESIZING = ("smolvla", "pi0", "pi05", "pi0_fast", "groot", "xvla", "wall_x")
# words in a camera's key that say which camera it is (the wrist camera's several names as one); two keys
# whose words differ name two cameras
WRIST = ("wrist", "hand", "gripper", "eye")
CAMERA_WORDS = (
    "front",
    "top",
    "side",
    "left",
    "right",
    "back",
    "overhead",
    "agentview",
    "base",
    "high",
    "low",
)


def deploy_rows(cfg: Any, src: Sources) -> list[Check]:
    """Every D's rows; none where the launch names no D."""
    checks: list[Check] = []
    for d in reader.read_deployments(cfg):
        checks += place_rows(src, d)
    return checks


def place_rows(src: Sources, d: Deployment) -> list[Check]:
    """One D's rows: what it is and how it was read, each input the policy reads, the action it takes,
    the cameras by lerobot's rule, the rates; one soft row only where D cannot be read."""
    if d.problem and d.invalid:  # a value lerobot refuses: the run fails there, whatever else is right
        message = f"{d.line}: {d.problem} (lerobot refuses it where the policy would run)"
        return [_row(d, "read", d.kind, "error", message, evidence=reader.describe(d))]
    if d.problem:
        message = f"{d.line}: D cannot be read, so where the policy runs is not judged: {d.problem}"
        evidence = reader.describe(d)
        return [_row(d, "read", d.kind, "mismatch", message, severity="soft", evidence=evidence)]
    checks = [_source_row(d)]
    for key, feature in _policy_inputs(src).items():
        checks += _input_rows(src, d, key, feature)
    checks += _action_rows(src, d)
    checks += _cameras_row(src, d)
    checks += _fps_rows(src, d)
    return checks


def _row(d: Deployment, check: str, feature: str, verdict: str, message: str, **fields: Any) -> Check:
    fields.setdefault("evidence", {})
    fields["evidence"] = {"place": d.place, "line": d.line, "read_by": d.read_by, **fields["evidence"]}
    return ROWS(f"deploy.{d.place}.{check}:{feature}", feature, verdict, message, **fields)


def few(items: Any) -> Any:
    """A list or mapping cut to its first `MAX_LISTED` items, the rest counted in a last item."""
    left = len(items) - MAX_LISTED
    if isinstance(items, dict):
        kept = dict(list(items.items())[:MAX_LISTED])
        return {**kept, "…": f"and {left} more"} if left > 0 else kept
    return [*list(items)[:MAX_LISTED], f"… and {left} more"] if left > 0 else list(items)


def _source_row(d: Deployment) -> Check:
    keys = few({k: _shape_text(f) for k, f in d.features.items()})
    message = (
        f"D: {d.line} ({d.kind}), read by {d.read_by}; provides {keys}"
        + (f" at {d.fps:g} fps" if d.fps else "")
        + (f"; rename map in force there: {few(d.rename_map)}" if d.rename_map else "; no rename map there")
    )
    return _row(d, "source", d.kind, "match", message, deployed=keys, evidence=reader.describe(d))


def _policy_inputs(src: Sources) -> dict[str, Feature]:
    """The inputs the policy reads, in its own keys: A's where A lists them (a LeRobot base, or the policy
    B builds fresh), else every observation of the dataset under B's rename map (a policy trained on this
    data reads what it holds)."""
    if src.a.kind in DECLARES_INPUTS or src.a.hints.get("fresh"):
        return {k: f for k, f in src.a.features.items() if f.role in INPUT_ROLES}
    rename = src.b.hints.get("rename_map") or {}
    return {rename.get(k, k): f for k, f in src.c.features.items() if f.role in INPUT_ROLES}


def _shape_text(f: Provided | Feature | None) -> str:
    if f is None:
        return "none"
    shape = chw(f) if isinstance(f, Feature) else f.shape
    if shape is None:
        return "(shape unknown)"
    if f.role == "image" and len(shape) == 3:
        return f"{shape[1]}x{shape[2]}x{shape[0]}"
    return str(tuple(shape))


def _input_rows(src: Sources, d: Deployment, key: str, a: Feature) -> list[Check]:
    """Is `key` provided at D, of the same type and shape as trained; and its dims by name."""
    at_d = d.renamed().get(key)
    trained, _ = provider(src, key)
    b = src.b_features().get(key)
    fields = {
        "expected": _shape_text(src.a.features[key]) if key in src.a.features else None,
        "configured": _shape_text(b) if b else None,
        "actual": _shape_text(trained) if trained else None,
        "deployed": _shape_text(at_d) if at_d else None,
    }
    evidence = {
        "d_keys": few(list(d.features)),
        "d_rename_map": few(dict(d.rename_map)),
        "policy_keys": few(list(_policy_inputs(src))),
    }
    if at_d is None:
        return [_missing_row(src, d, key, a, trained, fields, evidence)]
    if at_d.role != a.role:
        message = f"{key}: the policy reads a {a.role}, {d.line} gives a {at_d.role} under it"
        return [_row(d, "input", key, "mismatch", message, evidence=evidence, **fields)]
    rows = [_shape_row(src, d, key, a, trained, at_d, fields, evidence)]
    rows += _names_row(d, key, trained or a, at_d)
    rows += _camera_role_row(src, d, key, at_d, trained)
    return rows


def _missing_row(
    src: Sources, d: Deployment, key: str, a: Feature, trained: Feature | None, fields: dict, evidence: dict
) -> Check:
    renamed = few({k: d.rename_map.get(k, k) for k in d.features})
    message = (
        f"{key}: the policy reads it ({_shape_text(a)}), but no key of {d.line} provides it after the rename "
        f"map in force there ({few(d.rename_map) or 'none'}): D's keys -> the policy's: {renamed}; "
        f"the policy's inputs: {few(list(_policy_inputs(src)))}"
    )
    if trained is None:
        message += " (the training data does not provide it either: trained and run on the same padding)"
        return _row(d, "input", key, "mismatch", message, severity="soft", evidence=evidence, **fields)
    message += f"; trained on '{trained.key}', so at D it is missing (a crash) or blank (acting on nothing)"
    return _row(d, "input", key, "mismatch", message, evidence=evidence, **fields)


def _shape_row(
    src: Sources,
    d: Deployment,
    key: str,
    a: Feature,
    trained: Feature | None,
    at_d: Provided,
    fields: dict,
    evidence: dict,
) -> Check:
    ref = trained or a
    want, got = chw(ref) if ref.role == "image" else _flat(ref), at_d.shape
    what = "the training frames" if trained and ref.role == "image" else "trained"
    if got is None or want is None:
        why = d.unknown.get(at_d.key, "not given")
        message = f"{key}: {d.line} does not say its shape ({why}), so whether it fits is not known here"
        return _row(d, "input", key, "mismatch", message, severity="soft", evidence=evidence, **fields)
    if ref.role != "image":
        same = _dim(want) == _dim(got)
        message = f"{key}: {what} {_dim(want)} wide, {d.line} gives {_dim(got)}"
        return _row(d, "input", key, "match" if same else "mismatch", message, evidence=evidence, **fields)
    if tuple(want) == tuple(got):
        message = f"{key}: {d.line} gives {_shape_text(at_d)}, as {what}"
        return _row(d, "input", key, "match", message, evidence=evidence, **fields)
    return _image_mismatch(src, d, key, want, got, at_d, fields, evidence)


def _image_mismatch(
    src: Sources, d: Deployment, key: str, want: Any, got: Any, at_d: Provided, fields: dict, evidence: dict
) -> Check:
    trained_text, at_text = f"{want[1]}x{want[2]}x{want[0]}", _shape_text(at_d)
    policy = src.b.hints.get("policy_type") or src.a.hints.get("policy_type")
    aspect = want[1] * got[2] != want[2] * got[1]
    message = f"{key}: trained on {trained_text} frames, {d.line} gives {at_text}"
    if want[0] != got[0]:
        message += ": another channel count, which no resize mends"
        return _row(d, "input", key, "mismatch", message, evidence=evidence, **fields)
    if policy in RESIZING and not aspect:
        message += f" ({policy} resizes every camera to its own size, and the aspect ratio is the same)"
        return _row(d, "input", key, "mismatch", message, severity="soft", evidence=evidence, **fields)
    why = (
        "another aspect ratio, which a resize distorts"
        if aspect
        else f"a {policy or 'policy'} that does not resize"
    )
    message += f": {why}; the policy acts on frames unlike any it was trained on"
    return _row(d, "input", key, "mismatch", message, evidence=evidence, **fields)


def _names_row(d: Deployment, key: str, ref: Feature, at_d: Provided) -> list[Check]:
    """The dims by name where both sides name them: the same width in another order is the wrong joint."""
    if not ref.names or not at_d.names or ref.role == "image":
        return []
    want, got = [str(n) for n in ref.names], [str(n) for n in at_d.names]
    if want == got:
        message = f"{key}: {d.line} names its {len(got)} dims as the training data does"
        return [_row(d, "names", key, "match", message, actual=want, deployed=got)]
    differ = [(i, w, g) for i, (w, g) in enumerate(zip(want, got, strict=False)) if w != g]
    message = f"{key}: trained dims {want}, {d.line} gives {got}" + (
        f" (first differing dim {differ[0][0]}: '{differ[0][1]}' vs '{differ[0][2]}')" if differ else ""
    )
    return [_row(d, "names", key, "mismatch", message, actual=want, deployed=got)]


def _camera_role_row(
    src: Sources, d: Deployment, key: str, at_d: Provided, trained: Feature | None
) -> list[Check]:
    """A name mapping that sends one camera's frames to another camera's input: hard where both names say
    which camera they are and say different ones."""
    if at_d.role != "image":
        return []
    d_role = _role(at_d.source or at_d.key)
    ref_key = trained.key if trained is not None else key
    ref_role = _role(ref_key) or _role(key)
    if d_role is None or ref_role is None:
        return []
    fields = {"actual": ref_key, "deployed": at_d.key}
    if d_role == ref_role:
        message = f"{key}: fed from D's '{at_d.key}' ({d_role}), trained on '{ref_key}' ({ref_role})"
        return [_row(d, "camera", key, "match", message, **fields)]
    message = (
        f"{key}: trained on '{ref_key}' ({ref_role} camera), but at {d.line} it is fed from '{at_d.key}' "
        + (f"(which carries the {at_d.source} camera's frames) " if at_d.source else f"({d_role} camera) ")
        + f"after the rename map {d.rename_map or '(none)'}: the policy acts on another view"
    )
    return [_row(d, "camera", key, "mismatch", message, **fields)]


def _role(key: str) -> str | None:
    """The camera a key's last part names (`wrist`, `front`, `left wrist`), or None where it names none."""
    words = [w for w in re.split(r"[^a-z]+", key.lower().rsplit(".", 1)[-1]) if w]
    found = sorted({"wrist" if w in WRIST else w for w in words if w in WRIST or w in CAMERA_WORDS})
    return " ".join(found) or None


def _action_rows(src: Sources, d: Deployment) -> list[Check]:
    """What D takes from the policy: as wide as the actions it was trained to output, dims by name."""
    at_d = d.features.get("action")  # a rename map renames observations only
    trained = next((f for f in src.c.features.values() if f.role == "action"), None)
    policy = next((f for f in src.a.features.values() if f.role == "action"), None)
    ref = trained or policy
    if at_d is None or ref is None or ref.dim is None:
        return []
    if at_d.shape is None:
        message = f"action: {d.line} does not say what it takes ({d.unknown.get('action', 'not given')})"
        return [_row(d, "action", "action", "mismatch", message, severity="soft", actual=_shape_text(ref))]
    fields = {
        "expected": _shape_text(policy),
        "actual": _shape_text(trained) if trained else None,
        "deployed": _shape_text(at_d),
    }
    width = _dim(at_d.shape)
    message = f"action: the policy outputs {ref.dim} dims as trained ('{ref.key}'), {d.line} takes {width}"
    verdict = "match" if width == ref.dim else "mismatch"
    return [_row(d, "action", "action", verdict, message, **fields), *_names_row(d, "action", ref, at_d)]


def _cameras_row(src: Sources, d: Deployment) -> list[Check]:
    """lerobot's own rule (`validate_visual_features_consistency`): the policy's cameras and D's must be
    one a subset of the other, else lerobot raises its feature mismatch error when it builds the policy
    there."""
    if src.a.kind not in DECLARES_INPUTS and not src.a.hints.get("fresh"):
        return []
    expected = {k for k, f in src.a.features.items() if f.role == "image"}
    provided = {k for k, f in d.renamed().items() if f.role == "image"}
    if not expected and not provided:
        return []
    fields = {"expected": few(sorted(expected)), "deployed": few(sorted(provided))}
    ok = expected <= provided or provided <= expected
    text = f"the policy's cameras {fields['expected']}, {d.line}'s after its rename map {fields['deployed']}"
    if ok:
        left = few(sorted(expected - provided))
        message = f"{text}: one a subset of the other, as lerobot's rule asks" + (
            f" (the policy's {left} are not given there: see their input rows)" if left else ""
        )
        return [_row(d, "cameras", "visual", "match", message, **fields)]
    message = (
        f"{text}: neither is a subset of the other, which lerobot's validate_visual_features_consistency "
        f"refuses ('Feature mismatch between dataset/environment and policy config'; missing "
        f"{few(sorted(expected - provided))}, extra {few(sorted(provided - expected))}). lerobot applies "
        "that rule "
        "only where no rename map is given; with one, the first step that reads a missing camera fails"
        + (
            " (lerobot-train: at the first evaluation, after eval_freq steps)"
            if d.place == "eval_env"
            else ""
        )
    )
    return [_row(d, "cameras", "visual", "mismatch", message, **fields)]


def _fps_rows(src: Sources, d: Deployment) -> list[Check]:
    """The control loop's rate and each camera's against the dataset's: a chunk of actions recorded at
    30 fps and played at 15 moves at half speed. A simulator steps on its own clock (`env.fps` is the rate
    lerobot writes its videos at), so for an env the row is soft."""
    fps = src.c.claimed.get("fps")
    if not fps or (d.fps is None and not any(f.fps for f in d.features.values())):
        return []
    fps = float(fps)
    severity = "hard" if d.place in ("robot", "env") else "soft"
    window = src.b.hints.get("window") or src.a.hints.get("window") or {}
    steps = window.get("n_action_steps") or window.get("chunk_size")
    rows = []
    if d.fps is not None:
        same = abs(d.fps - fps) < 1e-6
        message = f"control: the dataset was recorded at {fps:g} fps, {d.line} runs at {d.fps:g} fps"
        if steps and not same:
            message += (
                f"; each chunk of {steps} actions spans {steps / fps:.2f} s in training and "
                f"{steps / d.fps:.2f} s at D"
            )
        if not same and severity == "soft":
            message += (
                " (a simulator steps on its own clock: env.fps is the rate lerobot writes its videos at)"
            )
        verdict = "match" if same else "mismatch"
        rows.append(
            _row(d, "fps", "control", verdict, message, severity=severity, actual=fps, deployed=d.fps)
        )
    read = set(_policy_inputs(src))  # a camera the policy never reads runs at whatever rate it likes
    for key, f in d.features.items():
        if f.fps is None or d.rename_map.get(key, key) not in read:
            continue
        same = abs(f.fps - fps) < 1e-6
        message = f"{key}: the dataset's frames at {fps:g} fps, {d.line}'s camera at {f.fps:g} fps"
        verdict = "match" if same else "mismatch"
        rows.append(_row(d, "fps", key, verdict, message, severity=severity, actual=fps, deployed=f.fps))
    return rows


def _flat(f: Feature) -> tuple[int, ...] | None:
    return tuple(f.shape) if f.shape is not None else None


def _dim(shape: Any) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
