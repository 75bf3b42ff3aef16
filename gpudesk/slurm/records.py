"""What the engine keeps of a job it submitted to a Slurm cluster (the store's slurm_jobs row):
which sbatch carries it, the id Slurm knows it by, and what Slurm last said of it. The store
reads and writes these (gpudesk.engine.store.slurm); the Slurm library's send, poller and views
take them."""

from __future__ import annotations

import msgspec

# A row's submission while its sbatch may or may not have reached Slurm (an intent row).
SENDING = ""
SENDING_STATE = "SUBMITTING"  # its Slurm state meanwhile, for the views


class SlurmRow(msgspec.Struct, frozen=True):
    job_id: int
    cluster: str  # its name, for the views
    conf: str  # the slurm.conf its commands read
    submission: str  # the sbatch's job id (an array's id for an array task); SENDING: none yet
    task: int | None  # its index in the array; None: not an array
    own_id: str | None  # the task's own job id, once Slurm gave it one (it started)
    output: str  # its output file
    script: str  # the script gpudesk submitted
    gres: str | None
    state: str | None = None  # Slurm's last word: PENDING, RUNNING, COMPLETED ...
    reason: str | None = None
    node: str | None = None
    cancel_sent: bool = False

    @property
    def sending(self) -> bool:
        """An intent: recorded before its sbatch, not yet known to have reached Slurm (the
        script path, unique per job and store, is how squeue's %o finds it if it did)."""
        return self.submission == SENDING

    @property
    def slurm_id(self) -> str:
        """How squeue and scancel name it: "12", or "12_3" for task 3 of array 12."""
        return self.submission if self.task is None else f"{self.submission}_{self.task}"
