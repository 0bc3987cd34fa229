"""How every reader opens a file: regular files only, small files capped, YAML without bombs.

An input on a shared filesystem can be anything: a FIFO (opening it blocks until a writer comes, so the
launch hangs with no output), a symlink to `/dev/zero` (reading it to EOF never ends), a 2 GiB "JSON"
file, a YAML file whose anchors expand to a billion nodes (PyYAML builds it shared, and the first walk
over it takes minutes to reach MemoryError), or a document nested so deep that the parser recurses past
Python's limit. Each of these becomes an `InputError` naming the file, before the expensive part.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tokenize
import zipfile
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import InputError

# metadata (info.json, stats.json, configs, cards, waivers) is small; a bigger file is not metadata
MAX_METADATA_BYTES = 64 * 2**20
MAX_JSONL_BYTES = 512 * 2**20  # per-episode metadata grows with the episode count
# what numpy raises on a garbage or truncated .npy/.npz: its header parser runs Python's tokenizer and
# literal_eval over the header text, so an unclosed bracket is a TokenError, not a ValueError
NPY_ERRORS = (OSError, ValueError, EOFError, SyntaxError, tokenize.TokenError, zipfile.BadZipFile)
MAX_DEPTH = 100  # nesting levels of a YAML document (configs are a handful deep)
MAX_EXPANDED_NODES = 1_000_000  # YAML nodes after expanding every alias (a bomb is 10^9)


def kind_of(mode: int) -> str:
    """What a non-regular file is, in the words an error message needs."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path: Path, what: str, max_bytes: int | None = None) -> os.stat_result:
    """The file's stat, or an InputError: missing, not a regular file (never opened), or too big."""
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found (expected {what})", path=path, field=path.name) from None
    except OSError as exc:  # a symlink loop, a name too long, no permission on a folder
        raise InputError(
            f"{path}: cannot stat it (expected {what}): {exc}", path=path, field=path.name
        ) from exc
    if not stat.S_ISREG(info.st_mode):
        raise InputError(
            f"{path}: is {kind_of(info.st_mode)}, expected a regular file ({what}); not opened",
            path=path,
            field=path.name,
        )
    if max_bytes is not None and info.st_size > max_bytes:
        raise InputError(
            f"{path}: {info.st_size} bytes, more than the {max_bytes} bytes allowed for {what}; refused",
            path=path,
            field=path.name,
        )
    return info


def utf8_name(root: Path, relative: str | Path, what: str) -> None:
    """A file name whose bytes are not UTF-8 is refused with the bytes shown as escapes: records
    (JSON) and consoles cannot carry it, and a reader that met it would crash writing its error."""
    try:
        str(relative).encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(relative).decode("utf-8", "backslashreplace")
        raise InputError(
            f"{root}: {what} '{shown}' has a file name that is not UTF-8; rename it", path=root, field=what
        ) from None


def read_bytes(path: Path, what: str, max_bytes: int | None = None) -> bytes:
    """A regular file's bytes (at most `max_bytes` + 1). Checked before the open, and again on the opened
    file: a FIFO put in its place between the stat and the open would block a reader forever, so the
    open does not wait for a writer."""
    regular_file(path, what, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InputError(f"{path}: cannot open {what}: {exc}", path=path, field=path.name) from exc
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            message = f"{path}: is {kind_of(mode)}, expected a regular file ({what}); not read"
            raise InputError(message, path=path, field=path.name)
        try:
            return handle.read() if max_bytes is None else handle.read(max_bytes + 1)
        except OSError as exc:
            raise InputError(f"{path}: cannot read {what}: {exc}", path=path, field=path.name) from exc


def read_text(path: Path, what: str, max_bytes: int = MAX_METADATA_BYTES) -> str:
    """A small text file as UTF-8, checked to be a regular file under `max_bytes` before it is opened."""
    raw = read_bytes(path, what, max_bytes)
    if len(raw) > max_bytes:  # grew since the stat
        raise InputError(f"{path}: more than {max_bytes} bytes ({what}); refused", path=path, field=path.name)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"{path}: not UTF-8 text (expected {what}): {exc}"
        raise InputError(message, path=path, field=path.name) from exc


def parse_json(text: str, path: Path, what: str, where: str | None = None) -> Any:
    """`json.loads` whose every failure (syntax, nesting past Python's recursion limit, an integer too
    long to convert) is an InputError naming the file and, for JSON lines, the line."""
    at = f" {where}" if where else ""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        line = where or f"line {exc.lineno}"
        raise InputError(
            f"{path}:{at} invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg} (expected {what})",
            path=path,
            field=line,
        ) from exc
    except RecursionError as exc:
        raise InputError(
            f"{path}:{at} JSON nested too deep to parse (expected {what})",
            path=path,
            field=where or path.name,
        ) from exc
    except ValueError as exc:
        message = f"{path}:{at} invalid JSON: {exc} (expected {what})"
        raise InputError(message, path=path, field=where or path.name) from exc


class BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a document nested deeper than MAX_DEPTH or whose aliases expand to
    more than MAX_EXPANDED_NODES nodes, counted on the composed node graph before any object is built.
    Timestamps stay strings, so a bad date (`2026-13-45`) reaches the field's own validation."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(f"nested more than {MAX_DEPTH} levels deep (at line {mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            size = expanded_size(node)
            if size > MAX_EXPANDED_NODES:
                raise yaml.YAMLError(
                    f"its anchors/aliases expand to more than {MAX_EXPANDED_NODES} nodes (a YAML bomb?)"
                )
        return node


BoundedLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)


def read_json(path: Path, what: str = "JSON", max_bytes: int = MAX_METADATA_BYTES) -> Any:
    """A JSON file (a regular file under `max_bytes`); any parse failure names the file."""
    return parse_json(read_text(path, what, max_bytes), path, what)


def expanded_size(root: yaml.Node) -> int:
    """Nodes the document has once every alias is expanded; shared nodes are weighed once (memo), so a
    bomb is measured in time linear in its text, without recursion."""
    weight: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in weight:
            continue
        children = _children(node)
        if done or not children:
            weight[id(node)] = 1 + sum(weight.get(id(c), 0) for c in children)
            if weight[id(node)] > MAX_EXPANDED_NODES:
                return weight[id(node)]
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in weight)
    return weight[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml(path: Path, what: str = "YAML", max_bytes: int = MAX_METADATA_BYTES) -> Any:
    """A YAML file through `BoundedLoader`; every failure is an InputError naming the file."""
    text = read_text(path, what, max_bytes)
    try:
        return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - BoundedLoader derives from SafeLoader
    except yaml.YAMLError as exc:
        message = " ".join(str(exc).split())
        raise InputError(
            f"{path}: invalid YAML (expected {what}): {message}", path=path, field=path.name
        ) from exc
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        raise InputError(
            f"{path}: YAML that cannot be loaded (expected {what}): {type(exc).__name__}: {exc}",
            path=path,
            field=path.name,
        ) from exc


PICKLE_MAGIC = (b"\x80", b"PK\x03\x04")  # pickle protocol >= 2; torch.save's zip container
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle", ".safetensors")


def refuse_pickles(path: Path, what: str) -> None:
    """A model path handed to one of the project's loaders holds no pickle-based weights: the loaders
    read safetensors only, and say so by name instead of relying on a library's defaults. Checked are the
    file itself, or a folder's weight files (by suffix), by their first bytes; nothing is unpickled."""
    path = Path(path)
    files = [path] if not path.is_dir() else sorted(p for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
    for file in files:
        regular_file(file, what)
        with open(file, "rb") as handle:
            head = handle.read(4)
        if head.startswith(PICKLE_MAGIC):
            raise InputError(
                f"{file}: a pickle-based file (torch.save / pickle); {what} is read from safetensors only, "
                "never unpickled",
                path=file,
                field=file.name,
            )


def npz_member(handle: Any, key: str, path: Path) -> Any:
    """One array of an open `np.load(..., allow_pickle=False)` .npz, read only after its header's shape x
    dtype has been checked against the bytes the archive member holds: a header declaring terabytes is
    an InputError naming the file and key, never an allocation attempt."""
    import numpy as np

    name = f"{key}.npy"
    try:
        info = handle.zip.getinfo(name)
        with handle.zip.open(name) as member:
            version = np.lib.format.read_magic(member)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read_header(member)
            header = member.tell()
    except KeyError:
        raise InputError(f"{path}: no array {key!r}", path=path, field=key) from None
    except NPY_ERRORS as exc:  # a garbage or truncated .npy header
        raise InputError(
            f"{path}: array {key!r} has no valid .npy header ({exc})", path=path, field=key
        ) from None
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if need > info.file_size - header:
        raise InputError(
            f"{path}: array {key!r} declares shape {shape} {dtype} ({need:,} bytes) but holds "
            f"{info.file_size - header:,} bytes; not read",
            path=path,
            field=key,
        )
    return handle[key]


def read_pinned(path: Path, what: str, sha256: str, root: Path) -> str:
    """The text of a file named by its digest when it was written: a regular file (not a link) inside
    `root` whose content still has that sha256. A content-addressed folder proves nothing on its own:
    anyone who can write there can swap the file, or link it elsewhere, between the write and the read;
    the digest kept beside the path can't be swapped with it."""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        raise InputError(f"{path}: cannot stat {what}: {exc}", path=path, field=path.name) from None
    if stat.S_ISLNK(mode):
        raise InputError(f"{path}: is a symbolic link, expected {what} as written; not read", path=path)
    if not path.resolve().is_relative_to(Path(root).resolve()):
        raise InputError(f"{path}: lies outside {root}, where {what} was written; not read", path=path)
    raw = read_bytes(path, what, MAX_METADATA_BYTES)
    found = hashlib.sha256(raw).hexdigest()
    if found != sha256:
        raise InputError(
            f"{path}: changed since it was written (sha256 {found[:16]}…, written as {sha256[:16]}…); "
            f"{what} is judged only as written",
            path=path,
            field=path.name,
        )
    return raw.decode("utf-8")
