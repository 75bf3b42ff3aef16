"""The reasons a placement gives in words: a job collocated (its predicted speed, what its
co-tenants lose), a job alone on an idle GPU that still shares it, a GPU whose MPS server
serves another user, a job whose memory hint was taken as unknown.
"""

from __future__ import annotations

from gpudesk.policy.demand import Demand
from gpudesk.policy.interference import Prediction
from gpudesk.policy.policy import GpuState
from gpudesk.units import gib


def collocated_reason(
    gpu: GpuState,
    share: str,
    demand: Demand,
    predicted: Prediction,
    margin: float,
    worst_gain: float | None = None,
) -> str:
    """`worst_gain`: what the station gains with the mechanism's costs at the top of their
    range (the robust rule), where the policy judged by it."""
    slowed = max(
        (b - a for b, a in zip(predicted.tenants_before, predicted.tenants_after, strict=True)),
        default=0.0,
    )
    worst = (
        ""
        if worst_gain is None
        else f" ({worst_gain:.2f} with its costs at the top of their range)"
    )
    return (
        f"collocated on GPU {gpu.index} under {share}: predicted speed "
        f"{predicted.rate:.2f}, its {len(gpu.tenants)} tenant(s) slowed by at most "
        f"{slowed:.2f}, station gains {predicted.gain:.2f} GPU{worst}; {gib(gpu.free_mib)} free "
        f"for {gib(demand.memory_mib)} + {gib(margin)} margin"
    )


def sliced_reason(under_mps: Prediction) -> str:
    """Why a job time-slices beside a GPU's MPS clients rather than joining them: as an MPS
    client it would gain the station less, both judged with their costs at the top of their
    range."""
    return (
        f"time-sliced rather than an MPS client: under MPS the model predicts speed "
        f"{under_mps.rate:.2f} and a station gain of {under_mps.gain:.2f} GPU, less with its "
        "costs at the top of their range"
    )


def idle_share_reason(gpu: GpuState, share: str, demand: Demand, mode: str) -> str:
    """Why a job alone on an idle GPU starts as a sharing tenant (`share`: "mps" or "naive")
    rather than holding the whole GPU: a one-GPU job that need not run alone leaves room for
    the jobs after it, under MPS where the GPU's server can take it."""
    asks = f"{demand.sm_text} and {gib(demand.memory_mib)} ({demand.source})"
    if share == "mps":
        return f"MPS, not the whole GPU: it asks for {asks}, so later jobs may share the GPU"
    if mode == "naive":
        return f"time-sliced, not the whole GPU (policy naive): it asks for {asks}"
    return (
        f"time-sliced, not the whole GPU: it asks for {asks}; no MPS server is usable on "
        f"GPU {gpu.index}"
    )


def mps_serves_other(gpu: GpuState, uid: int | None) -> str:
    """Why a job of `uid` only time-slices on the GPU: "" where its MPS server (if any) serves
    the job's own user."""
    other = gpu.mps_uid
    if other is None or uid is None or other == uid:
        return ""
    # her name as stored with her job (else her uid, as `user_name` says a nameless one), never
    # asked of the user database: placement runs on the engine's loop, where a lookup (LDAP
    # down) held every client
    named = next((t.login for t in gpu.tenants if t.uid == other and t.login), None)
    return (
        f"GPU {gpu.index}'s MPS server serves {named or other}'s jobs; an MPS server serves "
        "one user at a time"
    )


def foreign_reason(gpu: GpuState, uid: int, shared: str) -> str:
    return f"time-sliced: {mps_serves_other(gpu, uid)}; {shared}"


def unknown_reason(demand: Demand, room_mib: float, alone: bool) -> str:
    """Why a job whose memory figure is unknown (demand.hint_unknown) was placed as it was."""
    where = (
        f"it may use the GPU's {gib(room_mib)}"
        if alone
        else f"it may use the {gib(room_mib)} its co-tenants left free (its memory limit)"
    )
    return (
        f"memory taken as unknown: {demand.unknown}; started where the room is largest, {where}; "
        "if it runs out of memory it reruns alone on a whole GPU"
    )


def unknown_wait(demand: Demand, whole: bool) -> str:
    """How a waiting job whose memory figure is unknown will start."""
    where = (
        "it starts on idle GPUs"
        if whole
        else "it starts alone on the first idle GPU, or beside others where "
        f"{gib(demand.admit_mib)} and a margin are free (what a job without a hint is "
        "admitted for), with all the room left as its memory limit"
    )
    return (
        f"memory taken as unknown: {demand.unknown}; {where}, and reruns alone if it runs "
        "out of memory"
    )
