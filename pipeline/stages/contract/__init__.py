"""contract: base checkpoint (A) vs training config (B) vs dataset (C).

The stage's code is `stage.py` (`run`, `run_part`, `reconcile`, ...); this package's own import is
empty, so that a launch reads `config.py` (the typed thresholds) without importing the stage. Any name
of the stage's (`from pipeline.stages.contract import run`) is still found here, imported on first use.
"""

from __future__ import annotations

from pipeline.stages import lazy_package

__getattr__ = lazy_package(__name__)
