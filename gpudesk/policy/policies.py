"""The placement policies by name: what `[station] policy` and `gpudesk simulate --policy`
accept, and the policy object each name makes."""

from __future__ import annotations

from gpudesk.policy.carma import make_sharing_policy
from gpudesk.policy.policy import FifoPolicy, PlacementPolicy

# "fifo" is whole GPUs, first come first served; the others are collocation-aware
# (gpudesk.policy.collocation): "auto" picks a sharing mode per job, "exclusive",
# "naive", "mps" and "mig" force one, and "carma" is the published baseline.
POLICY_NAMES = ("fifo", "auto", "exclusive", "naive", "mps", "mig", "carma")


def make_policy(name: str) -> PlacementPolicy:
    if name == "fifo":
        return FifoPolicy()
    if name in POLICY_NAMES:
        return make_sharing_policy(name)
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
