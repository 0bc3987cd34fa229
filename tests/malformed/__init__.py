"""Malformed-input cases for tests/test_malformed_inputs.py (issue 14), built in the test's tmp folder."""
