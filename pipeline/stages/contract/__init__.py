"""contract: base checkpoint (A) vs training config (B) vs dataset (C). Being built (issue 3)."""
