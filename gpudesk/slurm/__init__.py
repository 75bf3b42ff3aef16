"""Slurm as a library (docs/slurm.md): `request` maps a job onto sbatch options and gres,
`script` writes the batch scripts, `commands` runs Slurm's clients (sbatch, squeue, scontrol,
scancel, sinfo) as the job's owner, `logs` reads a Slurm job's output as its owner, `export`
turns a profile into scripts for another cluster; for the engine's cluster jobs, `records` is
what it keeps of each (`SlurmRow`), `send` a submit's work off its loop, `poller` the thread
that follows them and `views` how such a job shows in its replies. The engine's Slurm backend,
which submits and follows a station's cluster jobs on its loop, is
gpudesk.engine.backends.slurm."""
