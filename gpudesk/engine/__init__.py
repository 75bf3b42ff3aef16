"""The engine: the daemon and what runs on its loop or holds its state (the loop, requests, job
control, the store, placement, telemetry, MIG and MPS, Slurm, the services it starts when
configured: metrics, tracking, the loader supervisor). What its clients share with it is
gpudesk.core; they reach it through gpudesk.api. Libraries it uses and that hold no daemon state
are beside it: gpudesk.policy, slurm, hw (the runner that starts and stops a job's processes
among them), tracking, metrics, joblog (docs/architecture.md)."""
