"""A model by Hub id, found in the local Hugging Face cache and nowhere else.

Compute nodes run offline, so `--policy.path=<org>/<name>` is looked up only in the cache, with
huggingface_hub's own lookup. That lookup trusts the cache's files: `refs/main` is joined onto
`snapshots/` as it reads, so a ref holding `../../outside/x` resolves out of the cache, and a snapshot
folder or file may be a link to anywhere. `hf_hub_download`, which lerobot loads with, refuses a ref
that is not a commit, so a base found that way is one `lerobot-train` would not load: the gate must not
judge it. Here a ref must be a 40-hex commit, and the snapshot and every file in it must lie inside the
repo's cache folder (blobs are there). Anything else is one line naming the file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pipeline.errors import InputError
from pipeline.storage.files import read_text

COMMIT = re.compile(r"[0-9a-f]{40}")
MAX_REF_BYTES = 4096
MAX_SNAPSHOT_ENTRIES = 100_000  # a model repo has tens of files; a deeper walk is not a model


def hub_cache() -> Path:
    """Where huggingface_hub looks (HF_HUB_CACHE, else HF_HOME/hub), read now, not at its import."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    return Path(os.environ.get("HF_HOME") or "~/.cache/huggingface").expanduser() / "hub"


def repo_folder(cache: Path, repo_id: str) -> Path:
    return cache / f"models--{repo_id.replace('/', '--')}"


def snapshot(repo_id: str, field: str, revision: str = "main") -> Path:
    """The cached snapshot of `repo_id`, checked to lie inside its cache folder; InputError otherwise."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    cache = hub_cache()
    _check_ref(repo_folder(cache, repo_id) / "refs" / revision, field)
    try:
        found = Path(snapshot_download(repo_id=repo_id, local_files_only=True, cache_dir=cache))
    except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError, OSError) as exc:
        raise InputError(
            f"{field}: {repo_id} is not in the local Hugging Face cache {cache} "
            f"({type(exc).__name__}); fetch it where there is internet: huggingface-cli download {repo_id}",
            field=field,
        ) from None
    return _inside(found, repo_folder(cache, repo_id), field)


def _check_ref(ref: Path, field: str) -> None:
    """A ref, where there is one, names a commit: 40 lowercase hex digits and nothing else."""
    if not os.path.lexists(ref):
        return
    text = read_text(ref, "a Hugging Face cache ref (a 40-hex commit)", MAX_REF_BYTES).strip()
    if not COMMIT.fullmatch(text):
        shown = text if len(text) <= 80 else text[:80] + "…"
        raise InputError(
            f"{field}: {ref} holds {shown!r}, not a 40-hex commit: a cache ref that points elsewhere is "
            "refused (huggingface_hub's hf_hub_download refuses it too, so lerobot would not load it)",
            path=ref,
            field=field,
        )


def _inside(found: Path, repo: Path, field: str) -> Path:
    """`found` as a path inside `repo/snapshots/<commit>`, with every file under it inside `repo`."""
    root = repo.resolve()
    resolved = found.resolve()
    if not COMMIT.fullmatch(found.name) or not resolved.is_relative_to(root / "snapshots"):
        raise InputError(
            f"{field}: the cached snapshot {found} resolves to {resolved}, outside {root / 'snapshots'}; "
            "a snapshot must be a 40-hex commit folder inside the repo's cache folder",
            path=found,
            field=field,
        )
    for count, entry in enumerate(found.rglob("*")):
        target = entry.resolve()
        if not target.is_relative_to(root):
            raise InputError(
                f"{field}: {entry} in the cached snapshot links to {target}, outside the repo's cache "
                f"folder {root}; refused",
                path=entry,
                field=field,
            )
        if count > MAX_SNAPSHOT_ENTRIES:
            raise InputError(f"{field}: {found} holds more than {MAX_SNAPSHOT_ENTRIES} entries", field=field)
    return found
