"""Starting a run from the command line, before anything is queued: the command line composed as Hydra
would (`compose`), the configuration checked against every stage's typed config (`checks`), and the
run folders guarded against a second launch (`runguard`). The entry itself is `pipeline.launch`."""
