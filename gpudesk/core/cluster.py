"""Where a job runs when it does not run on the station: a Slurm cluster (docs/slurm.md).

A `ClusterSpec` rides on a job's spec (`JobSpec.cluster`; None: the station). It comes from a
profile's `[cluster]` table, from `gpudesk run PROFILE --on slurm` or `gpudesk submit --on slurm`,
and says what sbatch needs beyond the job itself: the partition, account and QOS, how a
one-GPU job shares its GPU (`share`), and the Slurm configuration the submitter used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from gpudesk.text import is_text, quoted, spelled_char, unsafe_char

ClusterKind = Literal["slurm"]
CLUSTER_KINDS: tuple[ClusterKind, ...] = ("slurm",)
# How a one-GPU job asks for its GPU: "auto" picks from what the job asks and the cluster has
# (docs/slurm.md, "How a job's GPU becomes a gres"); the others force one of the station's
# placement modes: a whole GPU, a MIG slice, an MPS share, a time-sliced shard.
Share = Literal["auto", "whole", "mig", "mps", "timeslice"]
SHARES: tuple[Share, ...] = ("auto", "whole", "mig", "mps", "timeslice")
CLUSTER_KEYS = (
    "kind",
    "name",
    "partition",
    "account",
    "qos",
    "share",
    "gpu_type",
    "mig_profile",
    "cpus_per_task",
    "mem_gb",
    "conf",
)
MAX_CPUS_PER_TASK = 4096
# Slurm's own names: a partition, account, QOS or gres type is a word of letters, digits and
# these (sinfo and sacctmgr print them unquoted, so no space, comma or colon).
_SLURM_WORD = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+\-]{0,63}$")


def has_control(text: str) -> bool:
    """Does `text` hold a control character (below 0x20, or DEL)? A name that reaches an sbatch
    script may not: a newline in a `#` comment there starts a shell line of its own."""
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


class ClusterSpec(msgspec.Struct, frozen=True):
    """A job's cluster. Fields left None take the cluster's defaults (its default partition,
    the user's default account and QOS)."""

    kind: ClusterKind = "slurm"
    name: str | None = None  # a label for the views; default: the cluster's ClusterName
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    share: Share = "auto"
    gpu_type: str | None = None  # whole GPUs of this gres type (`gpu:a100:N`)
    mig_profile: str | None = None  # the MIG profile a one-GPU job asks for (`gpu:1g.10gb:1`)
    cpus_per_task: int = 1  # one job is one CPU slot on the station
    mem_gb: float | None = None  # host memory (--mem); None: the cluster's default
    conf: str | None = None  # the slurm.conf its Slurm commands read (SLURM_CONF)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in msgspec.structs.fields(self)}

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> ClusterSpec:
        return cls(**{k: v for k, v in data.items() if k in CLUSTER_KEYS})

    def label(self) -> str:
        """How views name it: `slurm:gpudesk-test` or `slurm`."""
        return f"{self.kind}:{self.name}" if self.name else self.kind


def _word(what: str, value: Any) -> str:
    if not isinstance(value, str) or not _SLURM_WORD.match(value):
        raise ValueError(
            f"{what}: expected a Slurm name (letters, digits, _ . + -; at most 64), "
            f"found {quoted(value) if isinstance(value, str) else repr(value)}"[:300]
        )
    return value


def check_cluster(value: Any) -> ClusterSpec:
    """A `[cluster]` table (a profile's, or a submit request's `cluster`). Raises ValueError
    naming the key."""
    if isinstance(value, ClusterSpec):
        value = value.to_dict()
    if not isinstance(value, Mapping):
        raise ValueError(
            f'expected a table such as {{kind = "slurm", partition = "gpu"}}, found {value!r}'[:300]
        )
    unknown = sorted(str(k) for k in value if k not in CLUSTER_KEYS)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown key (known: {', '.join(CLUSTER_KEYS)})")
    values = {k: v for k, v in value.items() if v is not None}
    kind = values.get("kind", "slurm")
    if kind not in CLUSTER_KINDS:
        raise ValueError(f"kind: gpudesk drives {', '.join(CLUSTER_KINDS)}; found {kind!r}")
    share = values.get("share", "auto")
    if share not in SHARES:
        raise ValueError(f"share: expected one of {', '.join(SHARES)}; found {share!r}")
    checked: dict[str, Any] = {"kind": kind, "share": share}
    if "name" in values:
        name = values["name"]
        if not isinstance(name, str) or not is_text(name) or not 0 < len(name) <= 64:
            raise ValueError(f"name: expected a short label, found {name!r}"[:300])
        bad = unsafe_char(name)
        if bad is not None:
            raise ValueError(
                f"name: a cluster's name is a label on one line: it cannot hold a control "
                f"character (a newline, a tab ...) or invisible formatting; found "
                f"{spelled_char(bad)} in {name!r}"[:300]
            )
        checked["name"] = name
    for key in ("partition", "account", "qos", "gpu_type", "mig_profile"):
        if key in values:
            checked[key] = _word(key, values[key])
    if "cpus_per_task" in values:
        cpus = values["cpus_per_task"]
        if (
            isinstance(cpus, bool)
            or not isinstance(cpus, int)
            or not 1 <= cpus <= MAX_CPUS_PER_TASK
        ):
            raise ValueError(f"cpus_per_task: expected 1 to {MAX_CPUS_PER_TASK}, found {cpus!r}")
        checked["cpus_per_task"] = cpus
    if "mem_gb" in values:
        mem = values["mem_gb"]
        if isinstance(mem, bool) or not isinstance(mem, (int, float)) or not 0 < mem <= 1 << 20:
            raise ValueError(f"mem_gb: expected host memory in GB (more than 0), found {mem!r}")
        checked["mem_gb"] = float(mem)
    if "conf" in values:
        conf = values["conf"]
        if (
            not isinstance(conf, str)
            or not is_text(conf)
            or has_control(conf)
            or not os.path.isabs(conf)
        ):
            raise ValueError(f"conf: expected the absolute path of a slurm.conf, found {conf!r}")
        checked["conf"] = conf
    return ClusterSpec(**checked)
