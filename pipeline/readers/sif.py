"""A pure-Python reader for SIF (Singularity Image Format) files: no Apptainer needed.

The gate must tell which image a job runs in on a login node, in CI and inside the job itself, where
Apptainer is rarely installed. The layout follows sylabs/sif (pkg/sif, spec version 01), little-endian:

- a 128-byte global header `<32s10s3s3s16s8q`: launch line, magic `SIF_MAGIC`, version, primary
  architecture, UUID, created, modified, free/total descriptors, descriptor offset/size, data offset/size;
- `total` descriptors of 585 bytes `<i?3I7q128s384s` from the descriptor offset: data type, used flag,
  id, group id, linked id, offset, size, size with padding, created, modified, uid, gid, name, extra;
- a partition's extra is `<ii3s` (filesystem, partition type, arch code); a signature's `<i256s`.

Apptainer keeps labels, definition file, help and runscript in a generic-JSON object named
`inspect-metadata.json` (`{"data": {"attributes": {...}}, "type": "container"}`). Every malformed or
truncated file raises `InputError` naming the offset and what was expected there. Hashes are streamed.
"""

from __future__ import annotations

import json
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pipeline.errors import InputError
from pipeline.storage.digest import sha256_read

HEADER = struct.Struct("<32s10s3s3s16s8q")
DESCRIPTOR = struct.Struct("<i?3I7q128s384s")
PARTITION_EXTRA = struct.Struct("<ii3s")
SIGNATURE_EXTRA = struct.Struct("<i256s")
MAGIC = b"SIF_MAGIC"
GROUP_MASK = 0xF0000000
MAX_DESCRIPTORS = 1 << 16
MAX_METADATA_BYTES = 16 * 2**20
INSPECT_METADATA = "inspect-metadata.json"

DATA_DEFFILE, DATA_ENV, DATA_LABELS, DATA_PARTITION, DATA_SIGNATURE, DATA_GENERIC_JSON = range(0x4001, 0x4007)
DATATYPES = {
    0x4001: "Def.FILE",
    0x4002: "Env.Vars",
    0x4003: "JSON.Labels",
    0x4004: "FS",
    0x4005: "Signature",
    0x4006: "JSON.Generic",
    0x4007: "Generic/Raw",
    0x4008: "Cryptographic Message",
    0x4009: "SBOM",
    0x400A: "OCI.RootIndex",
    0x400B: "OCI.Blob",
}
FSTYPES = {1: "Squashfs", 2: "Ext3", 3: "Archive", 4: "Raw", 5: "Encrypted squashfs"}
PARTTYPES = {1: "System", 2: "*System", 3: "Data", 4: "Overlay"}
PRIMARY_SYSTEM = 2
ARCHES = {
    "00": "unknown", "01": "386", "02": "amd64", "03": "arm", "04": "arm64", "05": "ppc64", "06": "ppc64le",
    "07": "mips", "08": "mipsle", "09": "mips64", "10": "mips64le", "11": "s390x", "12": "riscv64",
}  # fmt: skip
HASHTYPES = {
    1: "SHA-256",
    2: "SHA-384",
    3: "SHA-512",
    4: "BLAKE2s-256",
    5: "BLAKE2b-256",
}  # Go crypto.Hash names


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


@dataclass(frozen=True)
class SifObject:
    """One used descriptor: where its data lies and, for partitions and signatures, their extra fields."""

    id: int
    datatype: int
    group_id: int
    link: int
    link_is_group: bool
    offset: int
    size: int
    size_with_padding: int
    created: int
    modified: int
    name: str
    fs: str | None = None
    part_type: str | None = None
    arch: str | None = None
    hash_type: str | None = None
    entity: str | None = None

    @property
    def type_name(self) -> str:
        return DATATYPES.get(self.datatype, f"Unknown(0x{self.datatype:x})")

    @property
    def is_primary_partition(self) -> bool:
        return self.datatype == DATA_PARTITION and self.part_type == PARTTYPES[PRIMARY_SYSTEM]

    def listing(self) -> str:
        """The TYPE column of `siftool list`: `FS (Squashfs/*System/amd64)` for a partition."""
        if self.datatype == DATA_PARTITION:
            return f"{self.type_name} ({self.fs}/{self.part_type}/{self.arch})"
        if self.datatype == DATA_SIGNATURE:
            return f"{self.type_name} ({self.hash_type})"
        return self.type_name


@dataclass(frozen=True)
class SifImage:
    """The global header and the used descriptors of one SIF file (data is read on demand)."""

    path: Path
    file_size: int
    version: str
    arch: str
    uuid: str
    created: int
    modified: int
    descriptors_free: int
    descriptors_total: int
    descriptors_offset: int
    descriptors_size: int
    data_offset: int
    data_size: int
    objects: tuple[SifObject, ...]

    @property
    def primary_partition(self) -> SifObject | None:
        return next((o for o in self.objects if o.is_primary_partition), None)

    @property
    def signatures(self) -> tuple[SifObject, ...]:
        return tuple(o for o in self.objects if o.datatype == DATA_SIGNATURE)

    def read_object(self, obj: SifObject, limit: int = MAX_METADATA_BYTES) -> bytes:
        """A small object's bytes (definition file, JSON); partitions are hashed or mounted, not read."""
        if obj.size > limit:
            raise InputError(
                f"{self.path}: object {obj.id} ({obj.type_name}) at offset {obj.offset} is {obj.size} bytes;"
                f" expected at most {limit} for metadata",
                path=self.path,
                field=f"object {obj.id}",
            )
        with open(self.path, "rb") as handle:
            handle.seek(obj.offset)
            data = handle.read(obj.size)
        if len(data) != obj.size:
            raise _truncated(self.path, obj.offset, f"{obj.size} bytes of object {obj.id}", len(data))
        return data

    def inspect_metadata(self) -> dict[str, Any] | None:
        """Apptainer's `inspect-metadata.json` object, or None when the image has none."""
        obj = next(
            (o for o in self.objects if o.datatype == DATA_GENERIC_JSON and o.name == INSPECT_METADATA), None
        )
        if obj is None:
            return None
        try:
            data = json.loads(self.read_object(obj))
        except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, nested past the recursion limit
            raise InputError(
                f"{self.path}: object {obj.id} ({INSPECT_METADATA}) at offset {obj.offset}: "
                f"expected JSON: {exc}",
                path=self.path,
                field=INSPECT_METADATA,
            ) from exc
        if not isinstance(data, dict) or not isinstance((data.get("data") or {}).get("attributes", {}), dict):
            raise InputError(
                f"{self.path}: {INSPECT_METADATA} at offset {obj.offset}: expected "
                '{"data": {"attributes": {...}}, "type": "container"}',
                path=self.path,
                field=INSPECT_METADATA,
            )
        return data

    def attributes(self) -> dict[str, Any]:
        """labels, deffile, helpfile, runscript, test, environment: what `apptainer inspect` shows."""
        meta = self.inspect_metadata()
        attrs = dict(((meta or {}).get("data") or {}).get("attributes") or {})
        if "labels" not in attrs:
            labels = next((o for o in self.objects if o.datatype == DATA_LABELS), None)
            if labels is not None:
                try:
                    attrs["labels"] = json.loads(self.read_object(labels))
                except (ValueError, RecursionError) as exc:
                    message = f"{self.path}: labels object {labels.id}: expected JSON: {type(exc).__name__}"
                    raise InputError(message, path=self.path, field="labels") from exc
        if "deffile" not in attrs:
            deffile = next((o for o in self.objects if o.datatype == DATA_DEFFILE), None)
            if deffile is not None:
                attrs["deffile"] = self.read_object(deffile).decode("utf-8", "replace")
        return attrs

    def labels(self) -> dict[str, str]:
        labels = self.attributes().get("labels") or {}
        if not isinstance(labels, dict):
            raise InputError(f"{self.path}: labels: expected a mapping", path=self.path, field="labels")
        return {str(k): str(v) for k, v in labels.items()}

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for a record's evidence: header, objects, primary partition."""
        part = self.primary_partition
        return {
            "path": str(self.path),
            "size": self.file_size,
            "version": self.version,
            "arch": self.arch,
            "uuid": self.uuid,
            "objects": [
                {
                    "id": o.id,
                    "type": o.listing(),
                    "group": o.group_id,
                    "offset": o.offset,
                    "size": o.size,
                    "name": o.name,
                }
                for o in self.objects
            ],  # fmt: skip
            "primary_partition": None
            if part is None
            else {"id": part.id, "fs": part.fs, "arch": part.arch, "offset": part.offset, "size": part.size},
            "signatures": len(self.signatures),
        }


def _truncated(path: Path, offset: int, expected: str, found: int) -> InputError:
    return InputError(
        f"{path}: truncated SIF: expected {expected} at offset {offset}, found {found} bytes",
        path=path,
        field=f"offset {offset}",
    )


def _read_exact(handle: BinaryIO, path: Path, offset: int, size: int, what: str) -> bytes:
    handle.seek(offset)
    data = handle.read(size)
    if len(data) != size:
        raise _truncated(path, offset, what, len(data))
    return data


def read_sif(path: str | Path) -> SifImage:
    """Parse the header and every used descriptor; check each object lies inside the file."""
    path = Path(path)
    with open(path, "rb") as handle:
        size = path.stat().st_size
        raw = _read_exact(handle, path, 0, HEADER.size, f"the {HEADER.size}-byte SIF global header")
        launch, magic, version, arch, uid, *numbers = HEADER.unpack(raw)
        if not magic.startswith(MAGIC):
            raise InputError(
                f"{path}: not a SIF file: expected {MAGIC.decode()!r} at offset 32, found {magic!r}",
                path=path,
                field="offset 32",
            )
        created, modified, dfree, dtotal, doff, dsize, data_off, data_size = numbers
        if not 0 <= dtotal <= MAX_DESCRIPTORS or doff < HEADER.size or dsize < 0:
            raise InputError(
                f"{path}: malformed SIF header at offset 0: expected 0..{MAX_DESCRIPTORS} descriptors from "
                f"an offset >= {HEADER.size}, found {dtotal} descriptors at offset {doff}",
                path=path,
                field="offset 0",
            )
        table_end = doff + dtotal * DESCRIPTOR.size
        if table_end > size:  # name the first descriptor the file cuts, before any data range
            index = max(0, (size - doff) // DESCRIPTOR.size)
            at = doff + index * DESCRIPTOR.size
            found = max(0, size - at)
            raise _truncated(path, at, f"descriptor {index} ({DESCRIPTOR.size} bytes)", found)
        objects = tuple(_descriptors(handle, path, size, doff, dtotal))
    return SifImage(
        path=path,
        file_size=size,
        version=_text(version),
        arch=ARCHES.get(_text(arch), _text(arch)),
        uuid=str(uuid.UUID(bytes=uid)),
        created=created,
        modified=modified,
        descriptors_free=dfree,
        descriptors_total=dtotal,
        descriptors_offset=doff,
        descriptors_size=dsize,
        data_offset=data_off,
        data_size=data_size,
        objects=objects,
    )


def _descriptors(handle: BinaryIO, path: Path, size: int, offset: int, total: int) -> list[SifObject]:
    found = []
    for index in range(total):
        at = offset + index * DESCRIPTOR.size
        raw = _read_exact(handle, path, at, DESCRIPTOR.size, f"descriptor {index} ({DESCRIPTOR.size} bytes)")
        dtype, used, oid, group, link, off, osize, padded, created, modified, _u, _g, name, extra = (
            DESCRIPTOR.unpack(raw)
        )
        if not used:
            continue
        if off < 0 or osize < 0 or off + osize > size:
            raise InputError(
                f"{path}: truncated SIF: descriptor {index} (id {oid}, {DATATYPES.get(dtype, hex(dtype))}) "
                f"at offset {at} expects data at bytes {off}..{off + osize}, but the file ends at {size}",
                path=path,
                field=f"offset {at}",
            )
        fields: dict[str, Any] = {}
        if dtype == DATA_PARTITION:
            fs, ptype, parch = PARTITION_EXTRA.unpack_from(extra)
            fields = {
                "fs": FSTYPES.get(fs, f"Unknown({fs})"),
                "part_type": PARTTYPES.get(ptype, f"Unknown({ptype})"),
                "arch": ARCHES.get(_text(parch), _text(parch)),
            }
        elif dtype == DATA_SIGNATURE:
            htype, entity = SIGNATURE_EXTRA.unpack_from(extra)
            fields = {
                "hash_type": HASHTYPES.get(htype, f"Unknown({htype})"),
                "entity": entity[:20].hex().upper(),
            }
        found.append(
            SifObject(
                id=oid,
                datatype=dtype,
                group_id=group & ~GROUP_MASK,
                link=link & ~GROUP_MASK,
                link_is_group=(link & GROUP_MASK) == GROUP_MASK,
                offset=off,
                size=osize,
                size_with_padding=padded,
                created=created,
                modified=modified,
                name=_text(name),
                **fields,
            )
        )
    return found


def sha256_file(path: str | Path, offset: int = 0, size: int | None = None) -> str:
    """Streamed sha256 of an image or of `size` bytes from `offset` (a partition); a file shorter than the
    partition it declares is a named error, not the digest of what was there."""
    digest, done = sha256_read(path, offset, size)
    if size is not None and done < size:
        raise _truncated(Path(path), offset, f"{size} bytes", done)
    return digest


def partition_sha256(image: SifImage) -> str | None:
    """sha256 of the primary partition's bytes: equals `sha256sum` of the squashfs it was built from."""
    part = image.primary_partition
    return None if part is None else sha256_file(image.path, part.offset, part.size)


def normalize_sha256(value: Any, field: str) -> str:
    """`sha256:<hex>` or `<hex>`, any case -> lowercase hex; anything else names the field."""
    text = str(value or "").strip().lower().removeprefix("sha256:")
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise InputError(f"{field}: expected a sha256 (64 hex digits), got {value!r}", field=field)
    return text


def listing(image: SifImage) -> list[tuple[int, str, str, str, str]]:
    """Rows as `siftool list` prints them: id, group, link (`N (G)` for a group), start-end, type."""
    return [
        (
            o.id,
            str(o.group_id) if o.group_id else "NONE",
            (f"{o.link} (G)" if o.link_is_group else str(o.link)) if o.link else "NONE",
            f"{o.offset}-{o.offset + o.size}",
            o.listing(),
        )
        for o in image.objects
    ]
