"""hpc-preflight: the gate before a training run (see README.md; entry point `python -m pipeline.launch`).

A regular package, not a namespace package: a `pipeline/` folder elsewhere on `sys.path` (the user's
own project, the current directory) must never be merged into this one.
"""
