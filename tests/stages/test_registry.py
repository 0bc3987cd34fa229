"""The registry names the built-in stages without importing them; what each row says of a stage (its
parts, its inputs) is what the stage's own module says, and each named function resolves."""

from __future__ import annotations

import pytest

from pipeline import stages
from pipeline.stages import Entry, Stage


@pytest.mark.parametrize("name", sorted(stages._REGISTRY))
def test_every_named_function_and_config_resolves(name):
    stage = stages.get(name)
    assert stage.name == name and isinstance(stage.config, type)
    for fn in (stage.run, stage.run_part, stage.array, stage.unmet, stage.derives):
        if isinstance(fn, Entry):
            assert callable(fn.resolve()), fn.spec


def test_the_rows_agree_with_the_stages_own_declarations():
    from pipeline.stages.contract.deploy import DEPLOY_INPUTS
    from pipeline.stages.determinism.stage import PARTS
    from pipeline.stages.teacher_forced import INPUTS

    assert stages.get("determinism").parts == PARTS
    assert stages.get("teacher_forced").inputs == INPUTS
    assert set(DEPLOY_INPUTS) <= set(stages.get("contract").inputs)


def test_an_entry_names_module_and_function():
    entry = Entry("os.path:join")
    assert entry.module == "os.path" and entry("a", "b") == "a/b"
    with pytest.raises(ValueError, match="module:attribute"):
        Entry("os.path.join")
    stage = Stage(name="x", run="os.path:join")  # a string becomes an Entry, imported when called
    assert isinstance(stage.run, Entry) and not stage.builtin


def test_a_stage_package_finds_its_names_lazily():
    from pipeline.stages import contract
    from pipeline.stages.contract import run, stage

    assert run is stage.run and contract.alignment.__name__ == "pipeline.stages.contract.alignment"
    with pytest.raises(AttributeError):
        contract.no_such_name  # noqa: B018
