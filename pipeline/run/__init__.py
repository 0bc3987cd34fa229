"""Running a launched gate: the plan (a DAG of jobs, reuse from history), the executors that submit it
(Slurm through submitit; the local runner and its controller here), the job body that runs one stage,
part or the gate merge, and following a run live (`follow`, `status`)."""
