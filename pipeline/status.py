"""`python -m pipeline.status [run_id]` (and `preflight-status`): where a run stands; the table and
`sacct` reading live in `pipeline.run.status`."""

from __future__ import annotations

import sys

from pipeline.run.status import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
