"""The Slurm backend (docs/slurm.md): jobs whose spec names a cluster are submitted with sbatch,
followed through squeue and scontrol, and cancelled with scancel, instead of being placed on the
station. `request` maps a job onto sbatch options, `script` writes the scripts, `commands` runs
Slurm's clients, `backend` is the engine's collaborator that does the submitting and following.
"""
