"""determinism: same-seed twin runs and the train<->eval reload round trip. Being built (issue 4)."""
