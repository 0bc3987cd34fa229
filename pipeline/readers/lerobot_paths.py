"""Where LeRobot metadata puts an episode's files, read as LeRobot writes it and refused otherwise.

`meta/info.json` holds the path templates (`data_path`, `video_path`) that LeRobot fills with
`str.format`; `meta/episodes` (v3.0) holds each episode's chunk and file numbers and, per camera, its
span in a shared video. Filled blindly, a template with an unknown field (`{camera_name}`) or an
attribute access (`{episode_index.real}`, `{video_key.__class__}`) raises KeyError or AttributeError,
or reaches attributes of the values it is given; a NaN or null location is `int(NaN)`, and a NaN or
1e300 timestamp reaches PyAV's seek as an overflow. Each is refused here instead, as an `InputError`
naming the file, the field, the episode and the value, and what LeRobot writes there.
"""

from __future__ import annotations

import math
import re
import reprlib
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import InputError

# a format spec as LeRobot's templates use it (`:03d`, `:06d`): fill, align, sign, width, precision and a
# type; the width at most 3 digits, so a spec cannot make a path of gigabytes
SPEC = re.compile(r"(.?[<>=^])?[+\- ]?z?#?0?\d{0,3}[,_]?(\.\d{1,3})?[bcdeEfFgGnosxX%]?", re.DOTALL)
PATH_CHARS = 4096  # PATH_MAX: a filled template longer than this names no file
_SHOWN = reprlib.Repr()  # a value in a message: a template whole, a list of a million entries cut short
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlist, _SHOWN.maxdict = 240, 240, 8, 8


def shown(value: Any) -> str:
    """`repr(value)` for an error message, cut at a few hundred characters (a hostile file's value)."""
    return _SHOWN.repr(value)


def fill(template: Any, fields: Mapping[str, Any], path: Path, field: str) -> str:
    """`template.format(**fields)` where every replacement field is one of `fields` by plain name (with
    an optional format spec); anything else is an InputError naming the info.json field and template."""
    allowed = ", ".join("{" + name + "}" for name in fields)

    def refuse(why: str) -> InputError:
        return InputError(
            f"{path}: field '{field}' {shown(template)}: {why}; expected a path template using only "
            f"{allowed} (plain names, an optional format spec such as :03d)",
            path=path,
            field=field,
        )

    if not isinstance(template, str) or not template:
        raise refuse(f"a {type(template).__name__}, not a non-empty string")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:  # an unmatched brace
        raise refuse(str(exc)) from exc
    for _, name, spec, _ in parts:
        if name is None:
            continue
        if name not in fields:
            raise refuse(f"unknown replacement field {{{name}}}")
        if spec and not SPEC.fullmatch(spec):
            raise refuse(f"format spec {spec!r} of {{{name}}} is not a plain one")
    try:
        out = template.format(**fields)
    except (ValueError, TypeError) as exc:  # a spec that does not fit the value (`{episode_index:s}`)
        raise refuse(str(exc)) from exc
    if len(out) > PATH_CHARS or "\x00" in out:
        raise refuse(f"fills to a path of {len(out)} characters")
    return out


def chunks_size(info: Mapping[str, Any], path: Path) -> int:
    """v2.x `chunks_size` (episodes per chunk folder; LeRobot writes 1000): a positive integer, or an
    InputError naming info.json's field and the value (a string or NaN was a ValueError)."""
    value = info.get("chunks_size", 1000)
    if value is None:
        return 1000
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not numeric or value != int(value) or int(value) < 1:
        raise InputError(
            f"{path}: chunks_size is {shown(value)}; expected a positive integer (episodes per chunk)",
            path=path,
            field="chunks_size",
        )
    return int(value)


def location(value: Any, path: Path, field: str, episode: Any) -> int:
    """A chunk or file number from meta/episodes: a non-negative integer (LeRobot writes int64)."""
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not number or value < 0 or value != int(value):
        raise InputError(
            f"{path}: episode {episode}: field '{field}' is {shown(value)}; expected a non-negative integer "
            "(the chunk or file number LeRobot writes)",
            path=path,
            field=field,
        )
    return int(value)


def span(start: Any, end: Any, path: Path, prefix: str, episode: Any) -> tuple[float, float]:
    """An episode's `from_timestamp` / `to_timestamp` in its video file: finite seconds, from >= 0 and
    to >= from (whether they lie inside the file is the decoder's check, against the file itself)."""
    for name, value in (("from_timestamp", start), ("to_timestamp", end)):
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not number or value < 0:
            raise InputError(
                f"{path}: episode {episode}: field '{prefix}{name}' is {shown(value)}; expected finite "
                "seconds >= 0 (where the episode lies in its video file)",
                path=path,
                field=prefix + name,
            )
    if end < start:
        raise InputError(
            f"{path}: episode {episode}: field '{prefix}to_timestamp' is {end!r}, before its from_timestamp "
            f"{start!r}; expected the episode's end in its video file",
            path=path,
            field=prefix + "to_timestamp",
        )
    return float(start), float(end)


def unwritten(exc: InputError) -> bool:
    """Whether a `video_location` error is a value LeRobot never writes (a location or span refused
    here, a `video_path` of unknown fields) rather than an episode or file that is not there: rows name
    the first as such, not as a missing video."""
    return bool(exc.field) and (exc.field == "video_path" or str(exc.field).startswith("videos/"))
