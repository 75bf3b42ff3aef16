"""gpudesk: a terminal desk for single-server GPU workstations."""

__version__ = "0.1.0"
