"""determinism: same-seed twins bit-identical, a control that differs, DDP ranks agree, reloads match.

The stage's code is `stage.py`; this package's own import is empty, so that a launch reads `config.py`
(the typed thresholds) without importing the stage. Any name of the stage's
(`from pipeline.stages.determinism import run`) is still found here, imported on first use.
"""

from __future__ import annotations

from pipeline.stages import lazy_package

__getattr__ = lazy_package(__name__)
