"""A user's own config folder, added with `--config-dir` or `hydra.searchpath`, extends the shipped
config groups (which live inside the package) without copying them."""

import pytest

from tests.conftest import launch, other_stages

LAUNCHER = """# a site's Slurm profile, kept in the user's own config folder
name: slurm
requeue_max: 1
signal_delay_s: 120
poll_s: 5.0
max_parallel: null
additional_parameters: {constraint: site_a100}
"""


@pytest.mark.parametrize("how", ["--config-dir", "hydra.searchpath"])
def test_a_users_config_folder_adds_a_launcher_profile(tmp_path, how):
    mine = tmp_path / "my_conf"
    (mine / "launcher").mkdir(parents=True)
    (mine / "launcher" / "site.yaml").write_text(LAUNCHER)
    where = ["--config-dir", str(mine)] if how == "--config-dir" else [f"hydra.searchpath=[file://{mine}]"]
    proc = launch(tmp_path, *where, "launcher=site", "~demo", "dry_run=true", other_stages("container_check"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "#SBATCH --constraint=site_a100" in proc.stdout and "#SBATCH --signal=USR2@120" in proc.stdout
    assert "dry run: nothing submitted" in proc.stdout


def test_a_missing_user_config_is_named(tmp_path):
    """Hydra's own messages (exit 1): the folder, or the group option that is in none of the folders."""
    proc = launch(tmp_path, "--config-dir", str(tmp_path / "nowhere"), "launcher=site", "~demo")
    assert proc.returncode != 0 and str(tmp_path / "nowhere") in proc.stdout + proc.stderr
    (tmp_path / "empty").mkdir()
    proc = launch(tmp_path, "--config-dir", str(tmp_path / "empty"), "launcher=site", "~demo")
    assert proc.returncode != 0 and "launcher/site" in proc.stdout + proc.stderr
    assert not (tmp_path / "preflight").exists()
