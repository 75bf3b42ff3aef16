"""The vocabulary the engine and its clients share: job and dataset specs, the station's
settings (and a `[station]` table weighed against them, key by key: reconfigure), Slurm
clusters, identities, the MIG catalogue and the wire protocol's framing and codes. Pure data and
checks: no daemon, no threads, no third-party import (the import contract in pyproject.toml
holds it to that)."""
