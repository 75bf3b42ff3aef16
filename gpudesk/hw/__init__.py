"""Talking to the machine, each driver behind its own interface: the telemetry backends (NVML,
simulated, none) and the monitor that samples them (telemetry/), nvidia-smi's MIG commands and
the layouts the hardware allows (mig/), the MPS control daemon (mps), job cgroups
(containment) and the host's CPU and memory (hostmetrics). Nothing here knows the queue or
the daemon: the engine drives these."""
