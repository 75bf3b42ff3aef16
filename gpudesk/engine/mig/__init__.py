"""MIG: the profile tables (profiles), what nvidia-smi prints and its errors (nvidia_smi,
records), layouts the hardware allows (layout), driving nvidia-smi (manager), the layout the queue
wants (planner) and the engine's view of a station's MIG GPUs (station)."""
