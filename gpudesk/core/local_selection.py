"""A data selection told to a job that reads it without a producer: a Slurm job.

On the station the engine's producer for `NAME.PRESET` applies a data selection and the job's
`SharedLoader` reads what it serves. A Slurm job has no producer (docs/slurm.md): its loader
falls back to a local DataLoader over the dataset. `gpudesk run PROFILE --on slurm` therefore
puts the `[datasets.NAME]` table the job trains on in the job's environment (`ENV_SELECTION`),
and the fallback reads only that selection of it: the same factory, arguments, seed and target
as the pre-pass job that ran before it on the cluster, hence the same selection-cache entry
(computed there when no pre-pass cached it, as a producer would). `gpudesk.core.datasets`
writes and reads the value (`selection_env`, `selection_told`).
"""

from __future__ import annotations

# The variable's value: {"dataset": the name the job's SharedLoader asks for, "served": the
# served dataset's table (DatasetSpec.to_dict of `NAME.PRESET`)}.
ENV_SELECTION = "GPUDESK_SELECTION"
