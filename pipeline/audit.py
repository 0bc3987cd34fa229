"""`python -m pipeline.audit rebuild-timeline [audit_dir]`: regenerate the audit history's index; the
writers themselves live in `pipeline.record.audit`."""

from __future__ import annotations

import sys

from pipeline.record.audit import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
