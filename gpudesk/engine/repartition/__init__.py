"""Fitting MIG layouts to the queue: the layout the queued jobs would want on each MIG GPU
(planner), the station's MIG GPUs read and repartitioned, real or simulated (station), and the
engine's `mig_plan` / `mig_apply` requests (control). Built on `gpudesk.hw.mig`, the MIG
layer that only knows GPUs and nvidia-smi."""
