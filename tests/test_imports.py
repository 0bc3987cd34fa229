"""The import graph of `pipeline/` runs one way (DESIGN.md, house rules): no cycle, and the lower layers
never reach the stages, nor the stages the demo or the launcher.

The graph is read from the source with `ast` (module-level and function-level imports; imports under
`if TYPE_CHECKING:` are left out because they never run), so a cycle hidden in a function is found too.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _target(name: str) -> str | None:
    """The `pipeline` module an imported name lands in (the longest known prefix)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in MODULES:
            return candidate
    return None


def imports_of(module: str) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"), str(path))]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):  # a `__main__` guard's imports count too
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(t for a in node.names if (t := _target(a.name)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:  # `from pipeline import stages` imports the submodule
                target = _target(f"{base}.{alias.name}") or _target(base)
                if target:
                    found.add(target)
        stack.extend(ast.iter_child_nodes(node))
    found.discard(module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def reachable(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in GRAPH[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_graph_is_read_from_every_module():
    assert {"pipeline.launch", "pipeline.record.runfolder", "pipeline.stages", "pipeline.run.gate"} <= set(
        GRAPH
    )
    assert (
        "pipeline.record.runfolder" in GRAPH["pipeline.run.gate"]
        and "pipeline.run.gate" in GRAPH["pipeline.run.jobs"]
    )


def test_the_cycle_finder_finds_a_function_level_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_pipeline():
    found = cycles(GRAPH)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_lower_layers_never_reach_the_stages():
    lower = [
        m
        for m in GRAPH
        if _under(
            m, "pipeline.readers", "pipeline.record.records", "pipeline.errors", "pipeline.normalization"
        )
        or m.startswith("pipeline.storage")
    ]
    assert "pipeline.record.records" in lower and "pipeline.errors" in lower
    bad = {m: sorted(t for t in reachable(m) if _under(t, "pipeline.stages")) for m in lower}
    offenders = {m: t for m, t in bad.items() if t}
    assert not offenders, offenders


# The package's folders are its layers (docs/architecture.md), top first; a module imports only its own
# layer or those below it. The longest matching prefix decides, so `pipeline` alone is the package's root.
LAYERS = (
    ("entry", ("pipeline.launch", "pipeline.status", "pipeline.audit", "pipeline.images", "pipeline.cli",
               "pipeline.demo")),
    ("run", ("pipeline.run",)),
    ("stages", ("pipeline.stages", "pipeline.trainers")),
    ("record", ("pipeline.record", "pipeline.records")),
    ("data", ("pipeline.readers",)),
    ("base", ("pipeline", "pipeline.errors", "pipeline.normalization", "pipeline.inputs", "pipeline.progress",
              "pipeline.storage", "pipeline.trainlog")),
)  # fmt: skip


def layer_of(module: str) -> int:
    matches = [(len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes if _under(module, p)]
    return max(matches)[1]


def test_every_module_lies_in_a_layer_and_imports_only_downward():
    assert layer_of("pipeline.run.gate") == 1 and layer_of("pipeline.storage.files") == 5
    upward = [
        f"{m} ({LAYERS[layer_of(m)][0]}) -> {t} ({LAYERS[layer_of(t)][0]})"
        for m, targets in GRAPH.items()
        for t in targets
        if layer_of(t) < layer_of(m)
    ]
    assert not upward, upward


def test_the_top_of_the_package_reads_as_its_layers():
    """A handful of entry points and base modules beside the layer folders, not thirty files."""
    files = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(files) <= 10, files


def test_stages_never_reach_the_demo_or_the_launcher():
    stage_modules = [m for m in GRAPH if _under(m, "pipeline.stages")]
    bad = {
        m: sorted(t for t in reachable(m) if _under(t, "pipeline.demo", "pipeline.launch", "pipeline.cli"))
        for m in stage_modules
    }
    offenders = {m: t for m, t in bad.items() if t}
    assert not offenders, offenders


def _function_lengths() -> list[tuple[str, str, int]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                out.append((str(path.relative_to(PACKAGE.parent)), node.name, length))
    return out


def test_house_sizes_functions_and_modules_read_in_one_sitting():
    """DESIGN.md's house rule: functions <= 60 lines, modules <= 400."""
    long_functions = [f"{path}:{name} ({n} lines)" for path, name, n in _function_lengths() if n > 60]
    long_modules = [
        f"{p.relative_to(PACKAGE.parent)} ({n} lines)"
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := p.read_text(encoding="utf-8").count("\n")) > 400
    ]
    assert not long_functions and not long_modules, long_functions + long_modules


# What a process holds after an import, asked of a fresh interpreter (no timing: the names it imported).
# A launch and a job pay for every module they import, on every launch; plotting, statistics, torch,
# MuJoCo and the format readers are imported where they are used.
HEAVY = ("matplotlib", "scipy", "torch", "mujoco", "av", "jinja2", "h5py")
STAGES = (
    "container_check",
    "checkpoint_storage",
    "contract",
    "determinism",
    "teacher_forced",
    "render_cache",
)


def _modules_after(code: str) -> set[str]:
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _stages_imported(modules: set[str]) -> set[str]:
    """The stages whose own code is among `modules`: a stage module, or anything inside a stage package
    but its empty `__init__` and its `config` (the typed settings a launch validates)."""
    found = set()
    for name in STAGES:
        prefix = f"pipeline.stages.{name}"
        inside = [m for m in modules if m.startswith(prefix + ".") and m != prefix + ".config"]
        single = name in ("container_check", "checkpoint_storage") and prefix in modules
        if inside or single:
            found.add(name)
    return found


def test_importing_the_launch_imports_no_stage_and_no_heavy_library():
    modules = _modules_after("import pipeline.launch")
    assert "pipeline.launch" in modules
    assert not [m for m in (*HEAVY, "numpy", "pyarrow") if m in modules]
    assert not _stages_imported(modules)


def test_the_registry_names_every_stage_and_imports_none():
    modules = _modules_after(f"from pipeline import stages\nassert set(stages._REGISTRY) >= set({STAGES!r})")
    assert not [m for m in modules if m.startswith("pipeline.stages.") and m != "pipeline.stages.config"]
    loaded = _modules_after("from pipeline import stages\nstages.load()")  # every config, typed for Hydra
    assert not _stages_imported(loaded) and not [m for m in HEAVY if m in loaded]


def test_a_job_imports_its_own_stage_and_nothing_else():
    code = (
        "import pipeline.run.jobs\nfrom pipeline import stages\nstages.import_plugins(())\n"
        "stage = stages.get({name!r})\nstage.run.resolve()\n"
    )
    for name in ("container_check", "contract"):
        modules = _modules_after(code.format(name=name))
        assert _stages_imported(modules) == {name}
        assert not [m for m in ("matplotlib", "scipy", "torch", "mujoco", "jinja2", "h5py") if m in modules]


def test_the_demo_provider_on_a_built_demo_imports_no_build_library():
    """A launch on an already built demo writes only its D file (`deploy_env`): torch, the encoders and
    MuJoCo are the build's, and cost seconds of every such launch when imported anyway."""
    modules = _modules_after("import pipeline.demo.provider, pipeline.demo.deploy_env, pipeline.demo.marker")
    assert not [m for m in (*HEAVY, "pyarrow") if m in modules]
