"""The lines naming D, where the trained policy will run, kept once per launch for the fingerprint.

The contract job reads D from the config itself (`readers.deploy`): the `--env.*` flags on the training
line and the deploy line after its own `--`. Neither is a file, so neither would reach the contract's
input fingerprints, and a launch that changed only where the policy runs could take an earlier clear
result from the history. So the launch writes both, as typed, to `<output_root>/composed/<digest>/
deploy_lines.json` (content-addressed and written afresh, as B is: the same lines are the same file)
and names it in `deploy.lines`, a declared input of the contract.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, open_dict

from pipeline.cli.training_command import write_composed
from pipeline.readers import lerobot_command
from pipeline.readers.deploy import check_values, deploy_argv

LINES = "deploy_lines.json"


def fill(cfg: DictConfig) -> None:
    """`deploy.lines` from the training line's env flags and the deploy line, where either names D; a
    value of D lerobot refuses, or a D file that cannot be read, is refused first (exit 2)."""
    check_values(cfg)
    command = lerobot_command.parse(lerobot_command.training_argv(cfg))
    env = {k: v for k, v in (command.flags if command else {}).items() if k.startswith("env.")}
    if env and command is not None:
        env.update({k: command.flags[k] for k in ("rename_map", "eval_freq") if k in command.flags})
    deploy = deploy_argv(cfg)
    if not env and not deploy:
        return
    # written afresh, as B is: a file left at the content-addressed path is never trusted for reuse
    path, _ = write_composed(Path(str(cfg.output_root)), {"training_env": env, "deploy": deploy}, LINES)
    with open_dict(cfg):
        if cfg.get("deploy") is None:
            cfg.deploy = {}
        cfg.deploy.lines = str(path)
