"""Where jobs run, behind one protocol (`base.Backend`): `local` (the station's own slots) and
`slurm_jobs` (a Slurm cluster: over `slurm`, which submits and follows its jobs, and
`gpudesk.slurm.views`, which shows them as the engine shows its own). `engine/job_control.py`'s
`Backends` picks a job's backend from its spec."""
