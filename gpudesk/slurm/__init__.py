"""Slurm as a library (docs/slurm.md): `request` maps a job onto sbatch options and gres,
`script` writes the batch scripts, `commands` runs Slurm's clients (sbatch, squeue, scontrol,
scancel, sinfo) as the job's owner, `logs` reads a Slurm job's output as its owner, `export`
turns a profile into scripts for another cluster. The engine's Slurm backend, which submits and
follows a station's cluster jobs, is gpudesk.engine.backends.slurm."""
