"""Talking to the machine, each driver behind its own interface: the telemetry backends (NVML,
simulated, none) and the monitor that samples them (telemetry/), nvidia-smi's MIG commands and
the layouts the hardware allows (mig/), the MPS control daemon (mps), job cgroups
(containment), the host's CPU and memory (hostmetrics) and `gpudesk calibrate`'s probes on a
real GPU (probe_runner), the wrapper each job attempt runs under (wrapper), what starts, watches
and stops it (runner), the clock its time limit runs on (boottime) and which process a pid
names (process_start). Nothing here knows the
queue or the daemon: the engine and the CLI drive these."""
