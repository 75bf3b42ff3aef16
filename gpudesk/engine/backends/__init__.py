"""Where a job runs, other than the station's own slots: `slurm` submits jobs whose spec names
a cluster and follows them (`slurm_views` shows them as the engine shows its own jobs)."""
