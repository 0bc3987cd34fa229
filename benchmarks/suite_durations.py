"""Where the test suite's time goes: a full run's per-test durations grouped by file and by kind.

    python benchmarks/suite_durations.py RUN [BEFORE] [--top 15] [--json OUT]

RUN (and BEFORE, for a before/after table) is either pytest's `--junitxml` file (each testcase's time is
setup + call + teardown) or the text pytest printed with `--durations=0` (its `12.34s call  tests/x.py::t`
lines, the three phases summed per test; a trailing `rc=N` line is ignored).

The kind of a test is read from its source, not from its name, so that the same classifier sorts a
baseline run of another checkout and this one alike: the test function, the fixtures it requests
(from its module and the conftest files above it, followed transitively) and the module-level constants
either names. The first kind whose marks appear wins, in the order of `KINDS`: a test that launches the
DAG through Slurm is a Slurm launch even if it also builds a demo. The classification is a heuristic
for where to look, not a contract; `--json` writes every test's kind and seconds for a closer look.
Prints one table per grouping and, last, one JSON line with the totals per kind.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# kind -> regular expressions that mark it in the source gathered for a test, tried in this order
KINDS: dict[str, tuple[str, ...]] = {
    "launch slurm": (r"launcher=slurm", r"\bsbatch\b", r"\bsubmit_slurm\b"),
    "launch local": (r"\blaunch\(", r"\brun_launch\(", r"pipeline\.launch\b", r"\.seed\("),
    "demo build": (r"\bbuild\(", r"\bensure\(", r"\bbuild_models\(", r"\bgenerate_episodes\("),
    "training": (r"\btrain\w*\(", r"\btwin", r"\brun_part\(", r"\bfit\("),
    "rendering": (r"EvalRenderer", r"\brender\w*\(", r"mujoco", r"\bencode\w*\("),
}
UNIT = "pure unit"
Groups = dict[str, tuple[int, float]]  # key -> (tests, seconds)


@dataclass(frozen=True)
class Timed:
    """One test's seconds (all phases) and where it lives."""

    nodeid: str
    group: str
    seconds: float  # pytest-xdist's loadgroup tag (`test@slurm`): the scope the scheduler gave the test

    @property
    def file(self) -> str:
        return self.nodeid.split("::", 1)[0]

    @property
    def scope(self) -> str:
        """The unit `--dist loadgroup` hands one worker whole (tests/xdist_scope.py)."""
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))
        from tests.xdist_scope import scope_of

        return self.group or scope_of(self.nodeid)


def read_run(path: Path) -> list[Timed]:
    """A junit XML file or a `--durations=0` text file, told apart by their first character."""
    text = path.read_text(errors="replace")
    return _from_junit(path) if text.lstrip().startswith("<") else _from_durations(text)


def _from_junit(path: Path) -> list[Timed]:
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        module = case.get("classname", "")
        parts = module.split(".")
        # classname is the dotted module (plus a class); rebuild the path from the longest existing prefix
        for cut in range(len(parts), 0, -1):
            candidate = "/".join(parts[:cut]) + ".py"
            if (REPO / candidate).is_file() or cut == 1:
                rest = parts[cut:]
                break
        name, group = _untagged(case.get("name", ""))
        nodeid = "::".join([candidate, *rest, name])
        out.append(Timed(nodeid, group, float(case.get("time") or 0.0)))
    return out


DURATION_LINE = re.compile(r"^\s*([0-9.]+)s\s+(setup|call|teardown)\s+(\S.*?)\s*$")


def _from_durations(text: str) -> list[Timed]:
    seconds: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        match = DURATION_LINE.match(line)
        if match:
            seconds[match.group(3)] += float(match.group(1))
    return [Timed(*_untagged(nodeid), s) for nodeid, s in seconds.items()]


def _untagged(name: str) -> tuple[str, str]:
    """The test's name without pytest-xdist's loadgroup tag (`test@slurm`), and the tag ("" if none)."""
    tagged = re.fullmatch(r"(.*)@(\w+)", name)
    return (tagged[1], tagged[2]) if tagged else (name, "")


@cache
def _module(path: str) -> tuple[dict[str, str], dict[str, tuple[str, list[str]]], dict[str, str]]:
    """A test file's functions, its fixtures (source, requested names) and module-level assignments."""
    file = REPO / path
    if not file.is_file():
        return {}, {}, {}
    source = file.read_text()
    tree = ast.parse(source)
    functions, fixtures, constants = {}, {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_source_segment(source, node) or ""
            functions[node.name] = text
            if any("fixture" in ast.unparse(d) for d in node.decorator_list):
                fixtures[node.name] = (text, [a.arg for a in node.args.args])
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = ast.get_source_segment(source, node) or ""
    return functions, fixtures, constants


def _conftests(path: str) -> list[str]:
    """The test file itself and every conftest.py from its folder up to tests/."""
    out, folder = [path], Path(path).parent
    while folder.parts and folder.parts[0] == "tests":
        out.append(str(folder / "conftest.py"))
        folder = folder.parent
    return out


def gathered_source(nodeid: str) -> str:
    """The test function's source with its fixtures' (transitively) and the constants they name."""
    path, *rest = nodeid.split("::")
    name = re.sub(r"\[.*$", "", rest[-1]) if rest else ""
    functions, _, _ = _module(path)
    texts, seen, todo = [functions.get(name, "")], set(), list(_params(functions.get(name, "")))
    scopes = [_module(p) for p in _conftests(path)]
    while todo:
        wanted = todo.pop()
        if wanted in seen:
            continue
        seen.add(wanted)
        for _, fixtures, _ in scopes:
            if wanted in fixtures:
                text, params = fixtures[wanted]
                texts.append(text)
                todo.extend(params)
                break
    joined = "\n".join(texts)
    for _, _, constants in scopes[:1]:
        texts.extend(v for k, v in constants.items() if re.search(rf"\b{re.escape(k)}\b", joined))
    return "\n".join(texts)


def _params(function_source: str) -> list[str]:
    try:
        node = ast.parse(function_source.strip()).body[0]
    except (SyntaxError, IndexError):
        return []
    return [a.arg for a in node.args.args] if isinstance(node, ast.FunctionDef) else []


def kind_of(nodeid: str) -> str:
    source = gathered_source(nodeid)
    for kind, marks in KINDS.items():
        if any(re.search(mark, source) for mark in marks):
            return kind
    return UNIT


def grouped(run: list[Timed], key: str) -> Groups:
    out: dict[str, list[float]] = defaultdict(list)
    for t in run:
        out[{"file": t.file, "scope": t.scope}.get(key) or kind_of(t.nodeid)].append(t.seconds)
    return {k: (len(v), sum(v)) for k, v in out.items()}


def table(title: str, after: Groups, before: Groups | None) -> str:
    rows = sorted(set(after) | set(before or {}), key=lambda k: -max(after.get(k, (0, 0))[1], 0))
    total = sum(s for _, s in after.values())
    head = f"{title:<58} {'tests':>5} {'seconds':>8} {'share':>6}"
    head += f" {'before':>8} {'ratio':>6}" if before is not None else ""
    lines = [head, "-" * len(head)]
    for k in rows:
        n, s = after.get(k, (0, 0.0))
        line = f"{k:<58} {n:>5} {s:>8.1f} {s / total if total else 0:>6.1%}"
        if before is not None:
            b = before.get(k, (0, 0.0))[1]
            line += f" {b:>8.1f} {s / b if b else float('nan'):>6.2f}"
        lines.append(line)
    n_all = sum(n for n, _ in after.values())
    foot = f"{'total':<58} {n_all:>5} {total:>8.1f} {1:>6.0%}"
    if before is not None:
        b_all = sum(s for _, s in before.values())
        foot += f" {b_all:>8.1f} {total / b_all if b_all else float('nan'):>6.2f}"
    return "\n".join([*lines, foot])


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("run", type=Path)
    parser.add_argument("before", type=Path, nargs="?")
    parser.add_argument("--top", type=int, default=15, help="the slowest tests listed (0: none)")
    parser.add_argument("--json", type=Path, help="write every test's nodeid, kind and seconds here")
    args = parser.parse_args(argv)
    run = read_run(args.run)
    before = read_run(args.before) if args.before else None
    for key in ("kind", "file", "scope"):
        print(table(f"by {key}", grouped(run, key), grouped(before, key) if before else None), end="\n\n")
    for t in sorted(run, key=lambda t: -t.seconds)[: args.top]:
        print(f"{t.seconds:8.1f}s  {kind_of(t.nodeid):<13} {t.nodeid}")
    if args.json:
        rows = [{"nodeid": t.nodeid, "kind": kind_of(t.nodeid), "seconds": t.seconds} for t in run]
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    kinds = grouped(run, "kind")
    summary = {"tests": len(run), "seconds": round(sum(t.seconds for t in run), 1)}
    summary["by_kind"] = {k: {"tests": n, "seconds": round(s, 1)} for k, (n, s) in kinds.items()}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
