"""A job's sbatch options from gpudesk's placement vocabulary (docs/slurm.md has the table).

Each option carries why it is there, in words: `gpudesk export slurm` writes that as the comment
above its `#SBATCH` line, and the engine logs it with the submission. On the station the engine
picks, per job, a whole GPU, a MIG slice, an MPS share or time-slicing; on Slurm the same choice
becomes a gres request made once, at submit, from what the job asks (`gpus`, `memory_gb`,
`sm_pct`), the `[cluster]` table (`share`, `gpu_type`, `mig_profile`) and what the cluster's
nodes offer (`sinfo -o %G`, parsed into a `GresOffer`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import msgspec

from gpudesk.core.cluster import ClusterSpec
from gpudesk.core.jobs import (
    DEFAULT_PREEMPT_GRACE_S,
    DEFAULT_PREEMPT_SIGNAL,
    PRIORITY_RANGE,
    JobSpec,
)
from gpudesk.units import sbatch_time

# A MIG profile as NVIDIA names it and Slurm's gres.conf types it (AutoDetect=nvml names them
# this way): "1g.10gb", "3g.40gb", "1g.10gb+me", "1c.3g.40gb" (a compute instance of a slice).
_MIG_PROFILE = re.compile(r"^(?:\d+c\.)?(\d+)g\.(\d+)gb(?:\+me)?$")
# One item of sinfo's %G: name[:type]:count, then an optional socket list "(S:0-1)".
_GRES_ITEM = re.compile(r"^([a-z]+)(?::([^:()]+))?:(\d+)(?:\([^)]*\))?$")


class SlurmMappingError(ValueError):
    """A job asks for something this cluster cannot be asked for (or not in this way)."""


class GresOffer(msgspec.Struct, frozen=True):
    """The GPU gres a cluster's nodes offer, from `sinfo -h -o %G` (`known` False: not asked,
    as for `gpudesk export slurm` without a cluster to ask; every choice is then the job's
    own or a whole GPU)."""

    gpu_types: tuple[str, ...] = ()  # whole-GPU types ("a100"); "" for untyped GPUs
    mig_profiles: tuple[str, ...] = ()  # typed GPUs named like MIG profiles ("1g.10gb")
    mps: bool = False
    shard: bool = False
    known: bool = False

    @classmethod
    def parse(cls, lines: Iterable[str]) -> GresOffer:
        """From sinfo's %G lines, e.g. `gpu:a100:2,gpu:1g.10gb:2,mps:100,shard:4(S:0)`."""
        types: set[str] = set()
        profiles: set[str] = set()
        mps = shard = False
        for line in lines:
            for item in line.strip().split(","):
                match = _GRES_ITEM.match(item.strip())
                if match is None:
                    continue
                name, kind, count = match.group(1), match.group(2) or "", int(match.group(3))
                if count == 0:
                    continue
                if name == "gpu":
                    (profiles if _MIG_PROFILE.match(kind) else types).add(kind)
                elif name == "mps":
                    mps = True
                elif name == "shard":
                    shard = True
        return cls(
            tuple(sorted(types)),
            tuple(sorted(profiles, key=_profile_order)),
            mps,
            shard,
            known=True,
        )

    def describe(self) -> str:
        if not self.known:
            return "not asked"
        parts = [f"gpu:{t}" if t else "gpu" for t in self.gpu_types]
        parts += [f"gpu:{p} (MIG)" for p in self.mig_profiles]
        parts += ["mps"] * self.mps + ["shard"] * self.shard
        return ", ".join(parts) or "no GPU gres"


def _profile_order(profile: str) -> tuple[int, int, str]:
    match = _MIG_PROFILE.match(profile)
    if match is None:
        return (1 << 30, 1 << 30, profile)
    return (int(match.group(2)), int(match.group(1)), profile)


def mig_memory_gb(profile: str) -> int | None:
    """The memory of a MIG profile, from its name ("3g.40gb" -> 40)."""
    match = _MIG_PROFILE.match(profile)
    return int(match.group(2)) if match else None


class SbatchOption(msgspec.Struct, frozen=True):
    """One sbatch option and why it is there."""

    flag: str  # "--gres"
    value: str  # "": a flag that takes no value (--requeue)
    why: str

    @property
    def arg(self) -> str:
        return f"{self.flag}={self.value}" if self.value else self.flag


def _gpu(kind: str | None, count: int) -> str:
    return f"gpu:{kind}:{count}" if kind else f"gpu:{count}"


def gres_choice(spec: JobSpec, cluster: ClusterSpec, offer: GresOffer) -> SbatchOption | None:
    """The gres a job asks for (None: a CPU job). Raises SlurmMappingError when its `share`
    cannot be met by what the job or the cluster has."""
    if spec.gpus == 0:
        return None
    share = cluster.share
    whole_type = cluster.gpu_type
    if spec.gpus > 1:
        if share not in ("auto", "whole"):
            raise SlurmMappingError(
                f"job {spec.name!r} asks for {spec.gpus} GPUs; only a one-GPU job can share its "
                f"GPU ([cluster] share = {share!r})"
            )
        return SbatchOption(
            "--gres",
            _gpu(whole_type, spec.gpus),
            f"gpus = {spec.gpus}: whole GPUs"
            + (f" of type {whole_type} ([cluster] gpu_type)" if whole_type else ""),
        )
    if share == "whole":
        return _whole(whole_type, "[cluster] share = 'whole'")
    if share == "mps":
        return _mps(spec, offer, forced=True)
    if share == "timeslice":
        return _shard(offer, "[cluster] share = 'timeslice'", forced=True)
    if share == "mig":
        return _mig(spec, cluster, offer, forced=True) or _whole(whole_type, "")
    # auto: what the station would weigh, made once from the job's own hints
    if cluster.mig_profile is not None:
        return _mig(spec, cluster, offer, forced=False)
    if spec.sm_pct is not None and spec.sm_pct < 100 and offer.mps:
        return _mps(spec, offer, forced=False)
    if spec.memory_gb is not None and offer.mig_profiles:
        chosen = _mig(spec, cluster, offer, forced=False)
        if chosen is not None:
            return chosen
    if spec.sm_pct is not None and spec.sm_pct < 100 and offer.shard:
        return _shard(
            offer, f"sm_pct = {spec.sm_pct:g} and the cluster offers no MPS", forced=False
        )
    because = "a one-GPU job with no sm_pct or memory_gb that a share fits"
    if not offer.known:
        because = "what the cluster offers was not asked, so no share is assumed"
    return _whole(whole_type, because)


def _whole(kind: str | None, because: str) -> SbatchOption:
    why = "gpus = 1: a whole GPU" + (f" of type {kind} ([cluster] gpu_type)" if kind else "")
    return SbatchOption("--gres", _gpu(kind, 1), why + (f"; {because}" if because else ""))


def _mps(spec: JobSpec, offer: GresOffer, *, forced: bool) -> SbatchOption:
    if spec.sm_pct is None:
        raise SlurmMappingError(
            f"job {spec.name!r}: an MPS share ([cluster] share = 'mps') is the job's sm_pct, "
            "and it names none"
        )
    if offer.known and not offer.mps:
        raise SlurmMappingError(
            f"job {spec.name!r}: the cluster offers no mps gres (it offers {offer.describe()})"
        )
    share = max(1, min(100, math.ceil(spec.sm_pct)))
    how = "[cluster] share = 'mps'" if forced else "auto: the cluster offers MPS"
    return SbatchOption(
        "--gres",
        f"mps:{share}",
        f"sm_pct = {spec.sm_pct:g}: an MPS share of {share}% of one GPU's SMs ({how}; Slurm "
        "sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)",
    )


def _shard(offer: GresOffer, because: str, *, forced: bool) -> SbatchOption:
    if forced and offer.known and not offer.shard:
        raise SlurmMappingError(
            f"the cluster offers no shard gres for time-slicing (it offers {offer.describe()})"
        )
    return SbatchOption(
        "--gres", "shard:1", f"time-sliced: one shard of a GPU that other jobs share ({because})"
    )


def _mig(
    spec: JobSpec, cluster: ClusterSpec, offer: GresOffer, *, forced: bool
) -> SbatchOption | None:
    if cluster.mig_profile is not None:
        if offer.known and cluster.mig_profile not in offer.mig_profiles:
            raise SlurmMappingError(
                f"[cluster] mig_profile = {cluster.mig_profile!r}: the cluster offers no such "
                f"gres (it offers {offer.describe()})"
            )
        return SbatchOption(
            "--gres",
            _gpu(cluster.mig_profile, 1),
            f"a MIG slice of profile {cluster.mig_profile} ([cluster] mig_profile)",
        )
    if spec.memory_gb is None:
        if forced:
            raise SlurmMappingError(
                f"job {spec.name!r}: [cluster] share = 'mig' picks the smallest MIG profile that "
                "holds the job's memory_gb, and it names none (or set [cluster] mig_profile)"
            )
        return None
    fits = [p for p in offer.mig_profiles if (mig_memory_gb(p) or 0) >= spec.memory_gb]
    if not fits:
        if forced and not offer.known:
            raise SlurmMappingError(
                f"job {spec.name!r}: [cluster] share = 'mig' picks the smallest MIG profile the "
                "cluster offers that holds the job's memory_gb, and the cluster was not asked "
                "what it offers (set [cluster] mig_profile, or let gpudesk ask it: sinfo)"
            )
        if forced:
            raise SlurmMappingError(
                f"job {spec.name!r}: no MIG profile the cluster offers holds memory_gb = "
                f"{spec.memory_gb:g} (it offers {offer.describe()})"
            )
        return None
    profile = fits[0]
    return SbatchOption(
        "--gres",
        _gpu(profile, 1),
        f"memory_gb = {spec.memory_gb:g}: the smallest MIG profile the cluster offers that holds "
        f"it ({profile}, {mig_memory_gb(profile)} GB)",
    )


def gres_mode(gres: str | None) -> str:
    """The station's placement mode (api.models.PlacementMode) a gres this module asked for
    stands for: none is a CPU job, `mps:N` an MPS share, `shard:1` time-slicing, a GPU typed
    like a MIG profile a MIG slice, any other GPU a whole one."""
    if not gres:
        return "cpu"
    name, _, rest = gres.partition(":")
    if name == "mps":
        return "mps"
    if name == "shard":
        return "naive"
    kind = rest.rpartition(":")[0]  # "1g.10gb" of "gpu:1g.10gb:1"; "" of "gpu:2"
    return "mig" if mig_memory_gb(kind) is not None else "exclusive"


def sbatch_options(spec: JobSpec, cluster: ClusterSpec, offer: GresOffer) -> list[SbatchOption]:
    """Every option a job's sbatch gets from its spec and its cluster, in the order a script
    lists them (output, array and dependency options are the submission's: gpudesk.engine.
    slurm.script)."""
    options = [SbatchOption("--job-name", spec.name, "the job's name")]
    for flag, value, key in (
        ("--partition", cluster.partition, "partition"),
        ("--account", cluster.account, "account"),
        ("--qos", cluster.qos, "qos"),
    ):
        if value is not None:
            options.append(SbatchOption(flag, value, f"[cluster] {key}"))
    gres = gres_choice(spec, cluster, offer)
    if gres is not None:
        options.append(gres)
    options.append(
        SbatchOption(
            "--cpus-per-task",
            str(cluster.cpus_per_task),
            "CPU cores: one job is one CPU slot on the station"
            if cluster.cpus_per_task == 1
            else "[cluster] cpus_per_task",
        )
    )
    if cluster.mem_gb is not None:
        options.append(
            SbatchOption("--mem", f"{math.ceil(cluster.mem_gb * 1024)}M", "[cluster] mem_gb")
        )
    if spec.time_limit_s is not None:
        options.append(
            SbatchOption(
                "--time",
                sbatch_time(spec.time_limit_s),
                f"time_limit = {spec.time_limit_s:g} s (Slurm acts on whole minutes)",
            )
        )
    options.extend(_begin_and_comment(spec))
    if spec.priority < 0:
        options.append(
            SbatchOption(
                "--nice",
                str(-spec.priority),
                f"priority = {spec.priority}: a nice of {-spec.priority} lowers it",
            )
        )
    elif spec.priority > 0:
        options.append(
            SbatchOption(
                "--nice",
                "0",
                f"priority = {spec.priority}: Slurm lets only its operators raise a job's "
                f"priority (a negative nice), so it goes at nice 0 (gpudesk's range is "
                f"{PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]})",
            )
        )
    return options


# The most seconds sbatch's --signal takes before the end (`sig_time`, a uint16: Slurm's
# src/common/proc_args.c get_signal_opts); gpudesk's grace is at most 3600 s anyway.
MAX_SIGNAL_TIME_S = 0xFFFF


def preempt_options(spec: JobSpec) -> list[SbatchOption]:
    """A preemptible job's --requeue and --signal (docs/slurm.md, "Preemptible jobs"), in the
    scripts `gpudesk export slurm` writes and in the engine's own submissions (whose poller
    follows a requeued job back to the queue: backends/slurm.py).

    `--signal=B:SIG@GRACE`: `B:` sends the signal to the batch shell alone (slurmstepd's
    kill(2) of its pid), which is the job's own process since the script execs it; without
    `B:` Slurm signals only job steps (srun), and the script starts none."""
    if not spec.preemptible:
        return []
    name = spec.preempt_signal.removeprefix("SIG")
    grace = min(MAX_SIGNAL_TIME_S, math.ceil(spec.preempt_grace_s))
    defaults = (
        " (gpudesk's defaults)"
        if spec.preempt_signal == DEFAULT_PREEMPT_SIGNAL
        and spec.preempt_grace_s == DEFAULT_PREEMPT_GRACE_S
        else ""
    )
    return [
        SbatchOption(
            "--requeue",
            "",
            "preemptible = true: a job Slurm preempts goes back to the queue and later runs the\n"
            "script again from the start, with the same job id (where the cluster's PreemptMode\n"
            "is REQUEUE; with CANCEL a preempted job is cancelled)",
        ),
        SbatchOption(
            "--signal",
            f"B:{name}@{grace}",
            f"preempt_signal = {spec.preempt_signal}, preempt_grace_s = "
            f"{spec.preempt_grace_s:g}{defaults}: {spec.preempt_signal} to the job's\n"
            "own process (B: the batch shell, which the script replaces with the job: exec),\n"
            f"{grace} s before its time limit (Slurm may send it up to 60 s earlier), and when it\n"
            "is preempted where the cluster sets PreemptParameters=send_user_signal (the\n"
            "cluster's GraceTime, not this, is then the time left). Unlike the station, Slurm\n"
            "signals that one process, not the job's process group: a job that starts\n"
            "workers passes it on",
        ),
    ]


def _begin_and_comment(spec: JobSpec) -> list[SbatchOption]:
    """sbatch's own --begin and --comment (submit --begin, --comment). The begin time in the
    engine's local time, as sbatch reads it (the same moment in a script exported now and
    submitted later; a time past means at once, to Slurm too)."""
    import time

    options = []
    if spec.begin_at is not None:
        local = time.localtime(spec.begin_at)
        shown = time.strftime("%Y-%m-%dT%H:%M:%S", local)
        options.append(SbatchOption("--begin", shown, f"begin, {time.strftime('%Z', local)}"))
    if spec.comment:
        options.append(SbatchOption("--comment", spec.comment, "comment (squeue -O comment)"))
    return options
