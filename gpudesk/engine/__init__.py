"""The engine: the daemon and what it runs on (the loop, requests, job control, the store, the
runner, placement, telemetry, MIG and MPS, Slurm, the loader supervisor). What its clients share
with it is gpudesk.core; they reach it through gpudesk.api."""
