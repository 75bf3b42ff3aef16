"""The daemon's side of the machine: the telemetry sink (samples in, views and events out), the
MPS watch, and MIG control (repartitioning a GPU's slices)."""
