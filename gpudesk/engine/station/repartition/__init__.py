"""Fitting MIG layouts to the queue on the station: its MIG GPUs read and repartitioned, real
or simulated (station), and the engine's `mig_plan` / `mig_apply` requests (control). The
layout the queued jobs would want, and whether it pays, are gpudesk.policy's (mig_planner,
mig_payoff); nvidia-smi is driven through gpudesk.hw.mig."""
