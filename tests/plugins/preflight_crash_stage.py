"""A stage that crashes: the gate must record it as `error` and block."""

from pipeline.stages import Stage, register


def run(cfg, ctx):
    raise RuntimeError("planted crash in a test stage")


register(Stage(name="crash", run=run, description="test stage that always crashes"))
