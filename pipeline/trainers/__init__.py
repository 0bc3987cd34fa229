"""Ready smoke trainers for `stages.determinism.train_cmd`: wrappers around a framework's own training
entry point that emit the `pipeline.trainlog` stream the determinism twins compare."""
