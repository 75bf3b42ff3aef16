"""Station telemetry: GPU backends (NVML, simulated, none), host readings, energy accounting and
the sampler the engine runs. `gpudesk top` and the TUI read what this package produces."""
