"""MIG partitions through `nvidia-smi`: read a GPU's instance profiles, their placements and the
instances it has, plan a layout that the hardware's placement rules allow, then apply or clear it.

Stdlib only (subprocess): no NVML, no daemon. gpudesk never enables MIG mode and never resets a
GPU; when MIG mode is off, or on but waiting for a reset, it says which commands the user must run.

The parsers key on the structure of what nvidia-smi prints (boxed tables, their header names,
`start:size` placements), not on fixed values: drivers differ in GiB figures, column widths and the
profiles they offer. Output they cannot read raises `MigError` quoting the line.

Two things about real nvidia-smi that no fixture shows and this module assumes:
- `nvidia-smi -L` numbers a GPU's MIG devices in the order of their GPU instance IDs, then compute
  instance IDs (the "MIG devices" table of plain `nvidia-smi` shows that order). `slots()` maps
  each MIG UUID to its instances that way, checking that the profile names agree.
- `nvidia-smi mig -cgi` places each new instance itself; it cannot be told where. Creating larger
  profiles first is what makes a set that fits on paper also fit in practice (on an A100 40GB,
  `-cgi 19,19,14,9` fails where `-cgi 9,14,19,19` succeeds), so `plan_layout` orders that way.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
import shutil
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

ENV_NVIDIA_SMI = "GPUDESK_NVIDIA_SMI"
DEFAULT_TIMEOUT = 60.0  # seconds per nvidia-smi call; creating instances can take a while
# NvidiaSmiError kinds that mean "this GPU cannot be partitioned now", not "nvidia-smi failed"
MIG_MODE_KINDS = ("mig-disabled", "mig-pending", "mig-unsupported")


# ----------------------------------------------------------------------------------- errors
class MigError(Exception):
    """Something about MIG went wrong; the message says what and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MigUsageError(MigError):
    """The request itself is wrong: a GPU or profile that does not exist (CLI exit 2)."""


class UnknownGpuError(MigUsageError):
    """No GPU has that index."""


class UnknownProfileError(MigUsageError):
    """A requested profile is not one the GPU offers."""

    def __init__(self, message: str, name: str, suggestions: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.name = name
        self.suggestions = tuple(suggestions)


class LayoutError(MigError):
    """The requested set of profiles does not fit on the GPU."""

    def __init__(self, message: str, profile: str) -> None:
        super().__init__(message)
        self.profile = profile


class NvidiaSmiTimeout(MigError):
    """nvidia-smi did not finish in time and was killed; what it was doing may be half done."""


class NvidiaSmiError(MigError):
    """nvidia-smi ran and failed. `kind` is one of: "insufficient-resources", "in-use",
    "permission", "mig-disabled", "mig-pending", "mig-unsupported", "no-gpu", "invalid", "other"."""

    def __init__(
        self, message: str, kind: str, argv: Sequence[str], returncode: int, output: str
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output


# ---------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Placement:
    """Where an instance sits: `size` slices from `start` (memory slices for GPU instances,
    compute slices within the GPU instance for compute instances)."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"

    @classmethod
    def parse(cls, text: str) -> Placement:
        match = re.fullmatch(r"(\d+):(\d+)", text.strip())
        if not match:
            raise ValueError(f"not a start:size placement: {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))


@dataclass(frozen=True)
class MigEntry:
    """A MIG device as `nvidia-smi -L` lists it under its GPU."""

    gpu: int
    name: str  # profile, e.g. "3g.20gb" or "1c.3g.20gb"
    device: int  # the MIG device index on this GPU
    uuid: str  # "MIG-..."


@dataclass(frozen=True)
class GpuEntry:
    index: int
    name: str
    uuid: str
    mig_devices: tuple[MigEntry, ...] = ()


def _short(name: str) -> str:
    return name[4:] if name.startswith("MIG ") else name


def _compute_slices(short_name: str) -> int:
    """7 for "7g.40gb", 1 for "1g.5gb+me"; 0 when the name does not say."""
    match = re.match(r"(\d+)g\.", short_name)
    return int(match.group(1)) if match else 0


@dataclass(frozen=True)
class GiProfile:
    """One row of `nvidia-smi mig -lgip`."""

    gpu: int
    name: str  # "MIG 1g.5gb"
    short_name: str  # "1g.5gb"
    id: int
    free: int
    total: int
    memory_gib: float
    sm: int | None = None
    ce: int | None = None
    dec: int | None = None
    enc: int | None = None
    jpeg: int | None = None
    ofa: int | None = None
    p2p: bool | None = None

    @property
    def compute_slices(self) -> int:
        return _compute_slices(self.short_name)


@dataclass(frozen=True)
class ProfilePlacements:
    """One line of `nvidia-smi mig -lgipp`: where instances of a profile can sit."""

    gpu: int
    profile_id: int
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class GpuInstance:
    """One row of `nvidia-smi mig -lgi`."""

    gpu: int
    name: str  # "MIG 3g.20gb"
    profile_id: int
    instance_id: int
    placement: Placement

    @property
    def short_name(self) -> str:
        return _short(self.name)


@dataclass(frozen=True)
class ComputeInstance:
    """One row of `nvidia-smi mig -lci`."""

    gpu: int
    gpu_instance_id: int
    name: str  # "MIG 3g.20gb", or "MIG 1c.3g.20gb" for part of a GPU instance
    profile_id: int
    instance_id: int
    placement: Placement | None = None

    @property
    def short_name(self) -> str:
        return _short(self.name)


@dataclass(frozen=True)
class PlannedInstance:
    """A GPU instance to create, in creation order. `placement` is one spot that makes the whole
    set fit; the driver picks the actual spot itself."""

    profile: GiProfile
    placement: Placement


@dataclass(frozen=True)
class MigSlot:
    """A usable MIG device after apply: its UUID (for CUDA_VISIBLE_DEVICES) and where it sits.
    The instance IDs and placement are None when they could not be matched for certain."""

    gpu: int
    device: int
    profile: str
    uuid: str
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    placement: Placement | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["placement"] = None if self.placement is None else str(self.placement)
        return data


@dataclass(frozen=True)
class MigLayout:
    """What a GPU is partitioned into now."""

    gpu_instances: tuple[GpuInstance, ...]
    compute_instances: tuple[ComputeInstance, ...]
    slots: tuple[MigSlot, ...]


@dataclass(frozen=True)
class MigMode:
    """MIG mode of a GPU from `--query-gpu=mig.mode.current,mig.mode.pending`."""

    current: str  # "enabled", "disabled", or "n/a" (the GPU cannot do MIG)
    pending: str

    @property
    def state(self) -> str:
        """ "enabled", "pending" (enabled, waiting for a GPU reset), "disabled", "unsupported"."""
        if self.current == "enabled":
            return "enabled"
        if self.pending == "enabled":
            return "pending"
        if self.current == "n/a":
            return "unsupported"
        return "disabled"


# ---------------------------------------------------------------------------------- parsers
def _parse_error(what: str, line: str, why: str = "") -> MigError:
    detail = f" ({why})" if why else ""
    return MigError(
        f"cannot read the output of `nvidia-smi {what}`: unexpected line "
        f"{line.rstrip()!r}{detail}. gpudesk may not know this driver's format; "
        f"please report it with the full output."
    )


_GPU_LINE = re.compile(r"GPU\s+(\d+):\s+(.*?)\s+\(UUID:\s*(\S+?)\)")
_MIG_LINE = re.compile(r"MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s*(\S+?)\)")


def parse_list_gpus(text: str) -> list[GpuEntry]:
    """`nvidia-smi -L`: GPUs, each with the MIG devices listed under it."""
    gpus: list[GpuEntry] = []
    migs: list[list[MigEntry]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if match := _GPU_LINE.fullmatch(stripped):
            gpus.append(GpuEntry(int(match.group(1)), match.group(2), match.group(3)))
            migs.append([])
        elif (match := _MIG_LINE.fullmatch(stripped)) and gpus:
            migs[-1].append(
                MigEntry(gpus[-1].index, match.group(1), int(match.group(2)), match.group(3))
            )
        else:
            raise _parse_error("-L", line)
    return [GpuEntry(g.index, g.name, g.uuid, tuple(m)) for g, m in zip(gpus, migs, strict=True)]


def _boxed_table(text: str, what: str) -> tuple[list[list[str]], list[list[tuple[str, str]]]]:
    """Split a boxed nvidia-smi table into its header rows (words of each line above the `|===|`
    rule, title line left out) and its records (the `|` lines between `+---+` rules), each record
    a list of (inner text, full line)."""
    headers: list[list[str]] = []
    records: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    in_body = False
    seen_table = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if re.fullmatch(r"\+-+\+", stripped):
            seen_table = True
            if current:
                records.append(current)
                current = []
            continue
        if re.fullmatch(r"\|=+\|", stripped):
            in_body = True
            continue
        if not (seen_table and stripped.startswith("|") and stripped.endswith("|")):
            raise _parse_error(what, line, "expected a table")
        inner = stripped[1:-1]
        if in_body:
            current.append((inner, line))
        elif not inner.strip().endswith(":"):  # skip the title, e.g. "GPU instances:"
            headers.append(inner.split())
    if current:
        records.append(current)
    if not in_body:
        raise _parse_error(
            what, text.strip().splitlines()[0] if text.strip() else "", "no table found"
        )
    return headers, records


def _int_or_none(token: str) -> int | None:
    return None if token.upper() in ("N/A", "-", "[N/A]") else int(token)


def _columns(header: list[str], after: str | None, default: Sequence[str]) -> list[str]:
    if after is not None and after in header:
        return [w.upper() for w in header[header.index(after) + 1 :]]
    return list(default)


def parse_gi_profiles(text: str) -> list[GiProfile]:
    """`nvidia-smi mig -lgip`. A profile takes a row under the header's first line (GPU, Name, ID,
    Instances Free/Total, then columns the header names: Memory, P2P, SM, DEC, ENC) and, on
    drivers that print one, a continuation row under the end of its second line (CE, JPEG, OFA).
    Rows are usually boxed in pairs; any grouping of the lines reads the same."""
    what = "mig -lgip"
    headers, records = _boxed_table(text, what)
    first = _columns(
        headers[0] if headers else [], "Instances", ("MEMORY", "P2P", "SM", "DEC", "ENC")
    )
    second = [w.upper() for w in headers[1]] if len(headers) > 1 else ["CE", "JPEG", "OFA"]
    rows: list[tuple[str, list[str], dict[str, str]]] = []  # (line, first-row tokens, values)
    for inner, line in (entry for record in records for entry in record):
        tokens = inner.split()
        split = next(
            (
                j
                for j in range(2, len(tokens) - 1)
                if tokens[j].isdigit() and re.fullmatch(r"\d+/\d+", tokens[j + 1])
            ),
            None,
        )
        if split is not None and tokens[0].isdigit():
            rest = tokens[split + 2 :]
            if len(rest) != len(first):
                raise _parse_error(what, line, f"expected columns {', '.join(first)}")
            rows.append((line, tokens[: split + 2], dict(zip(first, rest, strict=True))))
        elif (
            rows
            and len(tokens) <= len(second)
            and all(re.fullmatch(r"\d+|N/A|-", t, re.IGNORECASE) for t in tokens)
        ):
            rows[-1][2].update(zip(second[len(second) - len(tokens) :], tokens, strict=True))
        else:
            raise _parse_error(what, line, "no ID and Free/Total columns")
    profiles = []
    for line, tokens, values in rows:
        name = " ".join(tokens[1:-2])
        free, total = tokens[-1].split("/")
        try:
            memory = float(values["MEMORY"]) if "MEMORY" in values else 0.0
            numbers = {
                key.lower(): _int_or_none(values[key])
                for key in ("SM", "CE", "DEC", "ENC", "JPEG", "OFA")
                if key in values
            }
        except ValueError as exc:
            raise _parse_error(what, line, str(exc)) from None
        p2p = values.get("P2P")
        profiles.append(
            GiProfile(
                gpu=int(tokens[0]),
                name=name,
                short_name=_short(name),
                id=int(tokens[-2]),
                free=int(free),
                total=int(total),
                memory_gib=memory,
                p2p=None if p2p is None or p2p.upper() == "N/A" else p2p.lower() == "yes",
                **numbers,
            )
        )
    return profiles


_PLACEMENTS_LINE = re.compile(
    r"GPU\s+(\d+)\s+Profile\s+ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,\s]*)\}\s*:\s*(\d+)"
)


def parse_gi_placements(text: str) -> list[ProfilePlacements]:
    """`nvidia-smi mig -lgipp`: `GPU  0 Profile ID 14 Placements: {0,2,4}:2`."""
    result = []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _PLACEMENTS_LINE.fullmatch(line.strip())
        if not match:
            raise _parse_error("mig -lgipp", line)
        size = int(match.group(4))
        starts = [int(s) for s in match.group(3).replace(" ", "").split(",") if s]
        result.append(
            ProfilePlacements(
                int(match.group(1)), int(match.group(2)), tuple(Placement(s, size) for s in starts)
            )
        )
    return result


_EMPTY_GI = "No GPU instances found"
_EMPTY_CI = "No compute instances found"


def _id_columns(
    tokens: list[str], leading: int, line: str, what: str
) -> tuple[str, int, int, Placement | None]:
    """Name, profile ID, instance ID and placement from a row whose first `leading` tokens are
    IDs, followed by a multi-word name, then profile ID, instance ID and (newer drivers)
    a placement."""
    try:
        placement = Placement.parse(tokens[-1]) if ":" in tokens[-1] else None
        ids = tokens[:-1] if placement else tokens
        name = " ".join(ids[leading:-2])
        if not name:
            raise ValueError("no name")
        return name, int(ids[-2]), int(ids[-1]), placement
    except (ValueError, IndexError) as exc:
        raise _parse_error(what, line, str(exc)) from None


def parse_gpu_instances(text: str) -> list[GpuInstance]:
    """`nvidia-smi mig -lgi`; "No GPU instances found" is an empty list."""
    if text.strip().startswith(_EMPTY_GI):
        return []
    what = "mig -lgi"
    instances = []
    for record in _boxed_table(text, what)[1]:
        for inner, line in record:
            tokens = inner.split()
            if not tokens[0].isdigit():
                raise _parse_error(what, line)
            name, profile_id, instance_id, placement = _id_columns(tokens, 1, line, what)
            if placement is None:
                raise _parse_error(what, line, "no start:size placement")
            instances.append(GpuInstance(int(tokens[0]), name, profile_id, instance_id, placement))
    return instances


def parse_compute_instances(text: str) -> list[ComputeInstance]:
    """`nvidia-smi mig -lci`; "No compute instances found" is an empty list."""
    if text.strip().startswith(_EMPTY_CI):
        return []
    what = "mig -lci"
    instances = []
    for record in _boxed_table(text, what)[1]:
        for inner, line in record:
            tokens = inner.split()
            if len(tokens) < 2 or not (tokens[0].isdigit() and tokens[1].isdigit()):
                raise _parse_error(what, line)
            name, profile_id, instance_id, placement = _id_columns(tokens, 2, line, what)
            instances.append(
                ComputeInstance(
                    int(tokens[0]), int(tokens[1]), name, profile_id, instance_id, placement
                )
            )
    return instances


_CREATED_GI = re.compile(
    r"Successfully created GPU instance ID\s+(\d+) on GPU\s+(\d+) using "
    r"profile (.+?) \(ID\s+(\d+)\)"
)
_SUCCESS = re.compile(r"Successfully (created|destroyed) .*")


def parse_created_gpu_instances(text: str) -> list[tuple[int, str]]:
    """(GPU instance ID, short profile name) of each "Successfully created GPU instance" line of
    `nvidia-smi mig -cgi` output, failed runs included."""
    return [(int(m.group(1)), _short(m.group(3))) for m in _CREATED_GI.finditer(text)]


def _legacy_mig_ids(uuid: str) -> tuple[int, int] | None:
    """Drivers before R470 named MIG devices `MIG-GPU-<uuid>/<gi>/<ci>`."""
    match = re.fullmatch(r"MIG-GPU-[^/]+/(\d+)/(\d+)", uuid)
    return (int(match.group(1)), int(match.group(2))) if match else None


def match_slots(
    entry: GpuEntry,
    gpu_instances: Sequence[GpuInstance],
    compute_instances: Sequence[ComputeInstance],
) -> list[MigSlot]:
    """Pair the MIG devices `-L` lists under a GPU with its instances: device k is the k-th
    compute instance in (GPU instance ID, compute instance ID) order, when the profile names
    agree (see the module docstring); old-style UUIDs carry the IDs themselves."""
    by_id = {g.instance_id: g for g in gpu_instances}
    cis = sorted(compute_instances, key=lambda c: (c.gpu_instance_id, c.instance_id))
    result = []
    for k, dev in enumerate(sorted(entry.mig_devices, key=lambda d: d.device)):
        ids = _legacy_mig_ids(dev.uuid)
        if ids is None and k < len(cis) and cis[k].short_name == dev.name:
            ids = (cis[k].gpu_instance_id, cis[k].instance_id)
        gi = by_id.get(ids[0]) if ids else None
        result.append(
            MigSlot(
                entry.index,
                dev.device,
                dev.name,
                dev.uuid,
                ids[0] if ids else None,
                ids[1] if ids else None,
                gi.placement if gi else None,
            )
        )
    return result


# ------------------------------------------------------------------------------ error mapping
_KINDS = (  # first match wins
    ("permission", ("insufficient permissions", "permission denied", "no permission")),
    ("in-use", ("in use by another client",)),
    ("insufficient-resources", ("insufficient resources",)),
    ("mig-disabled", ("no mig-enabled devices found",)),
    ("no-gpu", ("no devices were found",)),
    ("invalid", ("invalid combination of input arguments", "invalid argument")),
    ("mig-unsupported", ("not supported",)),
)
_FAILED_PROFILE = re.compile(r"using profile\s+(\S+?):")


def _one_line(text: str, limit: int = 400) -> str:
    joined = " / ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


def classify_output(output: str) -> str:
    low = output.lower()
    for kind, needles in _KINDS:
        if any(n in low for n in needles):
            return kind
    return "other"


def enable_hint(gpu: int | None) -> str:
    i = "N" if gpu is None else gpu
    return (
        f"gpudesk never changes MIG mode or resets a GPU itself. To enable MIG, stop every "
        f"process on the GPU and run `sudo nvidia-smi -i {i} -mig 1`; if the driver leaves "
        f"the change pending, reset the GPU with `sudo nvidia-smi -i {i} -r` (nothing may run "
        f"on it) or reboot."
    )


def mig_mode_message(gpu: int | None, mode: MigMode | None, gpu_name: str = "") -> str:
    """Why MIG commands are refused on this GPU, and what the user must do."""
    which = "the GPU" if gpu is None else f"GPU {gpu}"
    state = mode.state if mode else "disabled"
    if state == "unsupported":
        named = f" ({gpu_name})" if gpu_name else ""
        return f"{which}{named} does not support MIG."
    if state == "pending":
        i = "N" if gpu is None else gpu
        return (
            f"MIG mode on {which} is enabled but pending a GPU reset: it takes effect only "
            f"after the GPU is reset. gpudesk never resets a GPU itself: stop every process "
            f"on it, then run `sudo nvidia-smi -i {i} -r`, or reboot."
        )
    return f"MIG mode is not enabled on {which}. {enable_hint(gpu)}"


def map_nvidia_smi_error(
    argv: Sequence[str],
    returncode: int,
    output: str,
    gpu: int | None = None,
    profile_names: Mapping[str, str] | None = None,
) -> NvidiaSmiError:
    """Turn a failed nvidia-smi run into one clear paragraph: what happened, what to do."""
    kind = classify_output(output)
    which = "the GPU" if gpu is None else f"GPU {gpu}"
    said = _one_line(output)
    if kind == "insufficient-resources":
        match = _FAILED_PROFILE.search(output)
        token = match.group(1) if match else ""
        profile = (profile_names or {}).get(token, token) or "the requested profile"
        message = (
            f"{which} has no room left for a {profile} instance (nvidia-smi: "
            f"Insufficient Resources): the layout does not fit the GPU's free slices. "
            f"`gpudesk mig profiles{'' if gpu is None else f' --gpu {gpu}'}` shows what is "
            f"free and where each profile can sit; create larger profiles first, or clear "
            f"the GPU first."
        )
    elif kind == "in-use":
        message = (
            f"{which} or one of its MIG instances is in use by another process "
            f"(nvidia-smi: In use by another client), so its MIG layout cannot change now. "
            f"Stop the processes on it first (`nvidia-smi` lists them; a monitoring agent "
            f"such as DCGM or nvsm, an MPS daemon or a container can hold it too), then "
            f"try again."
        )
    elif kind == "permission":
        message = (
            "changing MIG instances needs root (nvidia-smi: Insufficient Permissions). "
            "Run the command as root, e.g. with sudo, or let your user run nvidia-smi as "
            "root through a sudoers rule (`youruser ALL=(root) NOPASSWD: "
            "/usr/bin/nvidia-smi`) and point GPUDESK_NVIDIA_SMI at a wrapper script that "
            'runs `sudo -n nvidia-smi "$@"`.'
        )
    elif kind == "mig-disabled":
        message = mig_mode_message(gpu, None)
    elif kind == "no-gpu":
        message = f"nvidia-smi found no such GPU ({said})."
    else:
        message = f"`{shlex.join(argv)}` failed (exit {returncode}): {said or 'no output'}"
    return NvidiaSmiError(message, kind, argv, returncode, output)


# --------------------------------------------------------------------------------- planning
def resolve_profile(profiles: Sequence[GiProfile], name: str) -> GiProfile:
    """A profile by short name ("3g.20gb"), full name ("MIG 3g.20gb") or ID ("9")."""
    wanted = name.strip()
    for profile in profiles:
        if wanted in (profile.short_name, profile.name, str(profile.id)):
            return profile
    lowered = _short(wanted).lower()
    for profile in profiles:
        if profile.short_name.lower() == lowered:
            return profile
    names = [p.short_name for p in profiles]
    suggestions = difflib.get_close_matches(_short(wanted), names, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(suggestions)}?" if suggestions else ""
    listed = ", ".join(f"{p.short_name} (ID {p.id})" for p in profiles) or "none"
    raise UnknownProfileError(
        f"unknown MIG profile {name!r}.{hint} This GPU offers: {listed}.", name, suggestions
    )


def derive_placements(profiles: Sequence[GiProfile]) -> dict[int, tuple[Placement, ...]]:
    """Fallback for drivers without `-lgipp`: placements derived from `-lgip` alone. A profile
    spans the power of two of memory slices nearest its memory over the smallest profile's; its
    placements are the multiples of that span for as many instances as the memory slices and the
    compute slices (those of the largest profile) hold. This reproduces the A100 and H100 tables
    (1g {0..6}:1, 2g {0,2,4}:2, 3g {0,4}:4, 4g {0}:4, 7g {0}:8; H100 1g.20gb {0,2,4,6}:2)."""
    sized = [p for p in profiles if p.memory_gib > 0]
    if not sized:
        return {}
    smallest = min(p.memory_gib for p in sized)
    spans = {p.id: 2 ** max(0, round(math.log2(p.memory_gib / smallest))) for p in sized}
    memory_slices = max(spans.values())
    compute_slices = max(p.compute_slices for p in sized)
    derived = {}
    for p in sized:
        count = memory_slices // spans[p.id]
        if p.compute_slices and compute_slices:
            count = min(count, compute_slices // p.compute_slices)
        derived[p.id] = tuple(Placement(k * spans[p.id], spans[p.id]) for k in range(count))
    return derived


def plan_layout(
    profiles_available: Sequence[GiProfile],
    requested: Sequence[str],
    placements: Mapping[int, Sequence[Placement]],
    occupied: Sequence[Placement] = (),
) -> list[PlannedInstance]:
    """Order the creation of `requested` profiles so that the GPU can place each one, or raise.

    `profiles_available` and `placements` are what `-lgip` and `-lgipp` say (placements missing
    for a profile are derived from `-lgip`). The set must fit in the memory slices not in
    `occupied` (nothing, when the GPU is cleared first) and in the compute slices of the largest
    profile. Larger slices come first: the driver puts each new instance where it blocks the
    fewest others, which leaves room for smaller ones but not the reverse.
    Raises UnknownProfileError for a name the GPU does not offer, LayoutError when the set does
    not fit (naming the profile that finds no room)."""
    if not requested:
        raise UnknownProfileError(
            "no MIG profile given: name one or more, e.g. 3g.20gb,2g.10gb", ""
        )
    chosen = [resolve_profile(profiles_available, name) for name in requested]
    derived = derive_placements(profiles_available)
    spots = {p.id: tuple(placements.get(p.id) or derived.get(p.id, ())) for p in chosen}
    listed = ", ".join(p.short_name for p in chosen)
    for profile_id, count in Counter(p.id for p in chosen).items():
        profile = next(p for p in chosen if p.id == profile_id)
        if count > profile.total:
            raise LayoutError(
                f"the layout {listed} does not fit: it asks for {count} × "
                f"{profile.short_name}, and the GPU has room for at most "
                f"{profile.total}.",
                profile.short_name,
            )
        if not spots[profile_id]:
            raise LayoutError(
                f"the layout {listed} does not fit: nvidia-smi lists no placement "
                f"for {profile.short_name}.",
                profile.short_name,
            )
    compute_total = max((p.compute_slices for p in profiles_available), default=0)

    def size(p: GiProfile) -> int:
        return max(pl.size for pl in spots[p.id])

    order = sorted(
        range(len(chosen)),
        key=lambda i: (-size(chosen[i]), -chosen[i].compute_slices, -chosen[i].memory_gib, i),
    )
    ordered = [chosen[i] for i in order]

    def fit(
        items: list[GiProfile], used: tuple[Placement, ...], compute: int
    ) -> list[Placement] | None:
        if not items:
            return []
        head, *rest = items
        if compute_total and compute + head.compute_slices > compute_total:
            return None
        for spot in spots[head.id]:
            if any(spot.overlaps(u) for u in used):
                continue
            found = fit(rest, (*used, spot), compute + head.compute_slices)
            if found is not None:
                return [spot, *found]
        return None

    assignment = fit(ordered, tuple(occupied), 0)
    if assignment is not None:
        return [PlannedInstance(p, spot) for p, spot in zip(ordered, assignment, strict=True)]
    for n in range(1, len(ordered) + 1):
        if fit(ordered[:n], tuple(occupied), 0) is None:
            culprit = ordered[n - 1]
            before = ", ".join(p.short_name for p in ordered[: n - 1])
            after = f" once {before} {'is' if n == 2 else 'are'} placed" if before else ""
            busy = " in the slices left free by its current instances" if occupied else ""
            raise LayoutError(
                f"the layout {listed} does not fit on the GPU{busy}: no placement is left for "
                f"{culprit.short_name}{after}. `gpudesk mig profiles` shows each profile's "
                f"placements.",
                culprit.short_name,
            )
    raise AssertionError("unreachable: the full set failed but every prefix fits")


# ---------------------------------------------------------------------------------- manager
@dataclass
class _Step:
    argv: list[str]
    what: str  # for messages: "destroy the compute instances"


def _describe(steps: Sequence[_Step]) -> str:
    return "; ".join(f"{s.what} (`{shlex.join(s.argv)}`)" for s in steps)


class MigManager:
    """Drives `nvidia-smi` for MIG. The executable: the argument, else GPUDESK_NVIDIA_SMI, else
    `nvidia-smi` on PATH. Every call has a timeout and captures its output."""

    def __init__(self, nvidia_smi: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.from_env = not nvidia_smi and bool(os.environ.get(ENV_NVIDIA_SMI))
        self.nvidia_smi = nvidia_smi or os.environ.get(ENV_NVIDIA_SMI) or shutil.which("nvidia-smi")
        self.timeout = timeout

    # ------------------------------------------------------------------ running nvidia-smi
    def argv(self, *args: str) -> list[str]:
        if not self.nvidia_smi:
            raise MigError(
                "nvidia-smi was not found on PATH. Install the NVIDIA driver (it ships "
                f"nvidia-smi), or set {ENV_NVIDIA_SMI} to the nvidia-smi executable."
            )
        return [self.nvidia_smi, *args]

    def _run(
        self,
        args: Sequence[str],
        *,
        gpu: int | None = None,
        empty: Sequence[str] = (),
        profile_names: Mapping[str, str] | None = None,
    ) -> str:
        argv = self.argv(*args)
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise NvidiaSmiTimeout(
                f"`{shlex.join(argv)}` did not finish within "
                f"{self.timeout:g} s; the driver may be busy or hung (check "
                f"`nvidia-smi` by hand)."
            ) from None
        except OSError as exc:
            source = f" (from {ENV_NVIDIA_SMI})" if self.from_env else ""
            raise MigError(
                f"cannot run nvidia-smi at {argv[0]}{source}: "
                f"{exc.strerror or exc}. Install the NVIDIA driver, or set "
                f"{ENV_NVIDIA_SMI} to the nvidia-smi executable."
            ) from None
        output = proc.stdout + (("\n" + proc.stderr) if proc.stderr.strip() else "")
        if any(output.strip().startswith(e) for e in empty):
            return output  # "No GPU instances found": the parsers read it as an empty list
        # Listing commands may answer these with exit 0 on some drivers: still an error.
        if proc.returncode != 0 or classify_output(output.strip()[:200]) in (
            "mig-disabled",
            "no-gpu",
        ):
            error = map_nvidia_smi_error(argv, proc.returncode, output, gpu, profile_names)
            if error.kind == "mig-disabled" and gpu is not None:
                raise self._mode_error(gpu, error)
            if error.kind == "no-gpu" and gpu is not None:
                raise self._unknown_gpu(gpu)
            raise error
        return proc.stdout

    def _mode_error(self, gpu: int, error: NvidiaSmiError) -> MigError:
        """ "No MIG-enabled devices found" for GPU `gpu`: say why (off, pending, unsupported)."""
        modes = self.mig_modes()
        mode = modes.get(gpu)
        if modes and mode is None:
            return self._unknown_gpu(gpu)
        state = mode.state if mode else "disabled"
        name = ""
        if state == "unsupported":
            name = next((g.name for g in self._gpus_quietly() if g.index == gpu), "")
        kind = {"pending": "mig-pending", "unsupported": "mig-unsupported"}.get(
            state, "mig-disabled"
        )
        return NvidiaSmiError(
            mig_mode_message(gpu, mode, name), kind, error.argv, error.returncode, error.output
        )

    def _unknown_gpu(self, gpu: int) -> UnknownGpuError:
        known = ", ".join(str(g.index) for g in self._gpus_quietly()) or "none"
        return UnknownGpuError(f"there is no GPU {gpu}: nvidia-smi -L lists GPU(s) {known}.")

    def _gpus_quietly(self) -> list[GpuEntry]:
        try:
            return self.gpus()
        except MigError:
            return []

    # -------------------------------------------------------------------------- queries
    def gpus(self) -> list[GpuEntry]:
        """Every GPU and the MIG devices under it (`nvidia-smi -L`)."""
        return parse_list_gpus(self._run(["-L"]))

    def gpu(self, index: int) -> GpuEntry:
        gpus = self.gpus()
        for entry in gpus:
            if entry.index == index:
                return entry
        known = ", ".join(str(g.index) for g in gpus) or "none"
        raise UnknownGpuError(f"there is no GPU {index}: nvidia-smi -L lists GPU(s) {known}.")

    def mig_modes(self) -> dict[int, MigMode]:
        """Current and pending MIG mode per GPU index; empty if this driver cannot say."""
        try:
            text = self._run(
                ["--query-gpu=index,mig.mode.current,mig.mode.pending", "--format=csv,noheader"]
            )
        except MigError:
            return {}
        modes = {}
        for line in text.splitlines():
            parts = [p.strip().strip("[]").lower() for p in line.split(",")]
            if len(parts) == 3 and parts[0].isdigit():
                modes[int(parts[0])] = MigMode(parts[1], parts[2])
        return modes

    def profiles(self, gpu: int) -> list[GiProfile]:
        return [
            p
            for p in parse_gi_profiles(self._run(["mig", "-i", str(gpu), "-lgip"], gpu=gpu))
            if p.gpu == gpu
        ]

    def placements(self, gpu: int) -> dict[int, tuple[Placement, ...]]:
        """Possible placements per profile ID (`-lgipp`); empty when the driver lacks `-lgipp`,
        in which case planning derives them from `-lgip`."""
        try:
            text = self._run(["mig", "-i", str(gpu), "-lgipp"], gpu=gpu)
        except NvidiaSmiError as exc:
            if exc.kind == "invalid":
                return {}
            raise
        return {p.profile_id: p.placements for p in parse_gi_placements(text) if p.gpu == gpu}

    def instances(self, gpu: int) -> list[GpuInstance]:
        text = self._run(["mig", "-i", str(gpu), "-lgi"], gpu=gpu, empty=(_EMPTY_GI,))
        return [i for i in parse_gpu_instances(text) if i.gpu == gpu]

    def compute_instances(self, gpu: int) -> list[ComputeInstance]:
        text = self._run(["mig", "-i", str(gpu), "-lci"], gpu=gpu, empty=(_EMPTY_CI,))
        return [i for i in parse_compute_instances(text) if i.gpu == gpu]

    def slots(self, gpu: int, entry: GpuEntry | None = None) -> list[MigSlot]:
        """The GPU's MIG devices with their UUIDs, matched to their GPU and compute instances."""
        return list(self.layout(gpu, entry).slots)

    def layout(self, gpu: int, entry: GpuEntry | None = None) -> MigLayout:
        """The GPU's instances and MIG devices (`entry`: its `-L` record, if already read)."""
        entry = entry or self.gpu(gpu)
        gis = self.instances(gpu)
        cis = self.compute_instances(gpu)
        return MigLayout(tuple(gis), tuple(cis), tuple(match_slots(entry, gis, cis)))

    # ------------------------------------------------------------------------- changes
    def _clear_steps(self, gpu: int) -> list[_Step]:
        has_cis = bool(self.compute_instances(gpu))
        # compute instances live in GPU instances: with some, there are GPU instances too
        return self._clear_steps_for(gpu, has_cis or bool(self.instances(gpu)), has_cis)

    def _clear_steps_for(
        self, gpu: int, gpu_instances: bool, compute_instances: bool
    ) -> list[_Step]:
        steps = []
        if compute_instances:
            steps.append(
                _Step(self.argv("mig", "-i", str(gpu), "-dci"), "destroy the compute instances")
            )
        if gpu_instances or compute_instances:
            steps.append(
                _Step(self.argv("mig", "-i", str(gpu), "-dgi"), "destroy the GPU instances")
            )
        return steps

    def _create_step(self, gpu: int, plan: Sequence[PlannedInstance]) -> _Step:
        ids = ",".join(str(p.profile.id) for p in plan)
        return _Step(
            self.argv("mig", "-i", str(gpu), "-cgi", ids, "-C"),
            f"create {', '.join(p.profile.short_name for p in plan)}",
        )

    def _apply_steps(
        self, gpu: int, profiles: Sequence[str] | str
    ) -> tuple[list[_Step], list[PlannedInstance], dict[str, str]]:
        names = split_profiles(profiles)
        available = self.profiles(gpu)  # an unknown GPU or MIG mode off stops here
        plan = plan_layout(available, names, self.placements(gpu))
        steps = [*self._clear_steps(gpu), self._create_step(gpu, plan)]
        return steps, plan, {str(p.id): p.short_name for p in available}

    def plan_apply(self, gpu: int, profiles: Sequence[str] | str) -> list[list[str]]:
        """The exact commands `apply` would run (reads the GPU's state, changes nothing)."""
        return [s.argv for s in self._apply_steps(gpu, profiles)[0]]

    def plan_apply_to(
        self,
        gpu: int,
        profiles: Sequence[str] | str,
        available: Sequence[GiProfile],
        placements: Mapping[int, Sequence[Placement]],
        *,
        gpu_instances: bool,
        compute_instances: bool,
    ) -> list[list[str]]:
        """The commands `apply` would run on a GPU in the given state (its `-lgip` profiles,
        `-lgipp` placements, whether it has GPU and compute instances), without asking
        nvidia-smi: for state read already, or a simulated GPU. Raises like `plan_layout`."""
        plan = plan_layout(available, split_profiles(profiles), placements)
        steps = [
            *self._clear_steps_for(gpu, gpu_instances, compute_instances),
            self._create_step(gpu, plan),
        ]
        return [s.argv for s in steps]

    def verify_argv(self) -> list[str]:
        """The listing `apply` reads back to check the MIG devices it made."""
        return self.argv("-L")

    def apply(self, gpu: int, profiles: Sequence[str] | str) -> list[MigSlot]:
        """Replace the GPU's MIG layout with `profiles`: destroy its compute and GPU instances,
        create the new ones (each with a full compute instance), then return the MIG devices
        that `nvidia-smi -L` shows. A GPU in use is refused by nvidia-smi itself."""
        steps, plan, names = self._apply_steps(gpu, profiles)
        self._execute(gpu, steps, names)
        slots = self.slots(gpu)
        wanted = Counter(p.profile.short_name for p in plan)
        got = Counter(s.profile for s in slots)
        if wanted != got:
            shown = ", ".join(sorted(got.elements())) or "none"
            raise MigError(
                f"nvidia-smi reported success, but GPU {gpu} now shows MIG devices "
                f"{shown} instead of {', '.join(sorted(wanted.elements()))}. Run "
                f"`gpudesk mig list` to see its state."
            )
        return slots

    def plan_clear(self, gpu: int) -> list[list[str]]:
        """The exact commands `clear` would run (none when the GPU has no instances)."""
        return [s.argv for s in self._clear_steps(gpu)]

    def clear(self, gpu: int) -> list[list[str]]:
        """Destroy every compute and GPU instance on the GPU (MIG mode stays on); returns the
        commands it ran (none when the GPU had no instances)."""
        steps = self._clear_steps(gpu)
        self._execute(gpu, steps, {})
        return [s.argv for s in steps]

    def _execute(self, gpu: int, steps: Sequence[_Step], names: Mapping[str, str]) -> None:
        for n, step in enumerate(steps):
            try:
                self._run(step.argv[1:], gpu=gpu, profile_names=names)
            except MigError as exc:
                raise _with_state(exc, gpu, steps[:n], step) from None


def _with_state(exc: MigError, gpu: int, done: Sequence[_Step], failed: _Step) -> MigError:
    """The same error, its message extended by the state the failure left the GPU in."""
    partial = [m.group(0) for m in _SUCCESS.finditer(getattr(exc, "output", ""))]
    parts = [f"these steps had completed: {_describe(done)}"] if done else []
    if partial:
        parts.append(
            f"`{shlex.join(failed.argv)}` did this before it failed: " + "; ".join(partial)
        )
    if isinstance(exc, NvidiaSmiTimeout):
        parts.append(f"`{shlex.join(failed.argv)}` was stopped midway")
    if not parts:
        note = f"Nothing was changed on GPU {gpu}."
    else:
        changed = (
            "may be partly changed"
            if isinstance(exc, NvidiaSmiTimeout)
            else "is now partly changed"
        )
        note = (
            f"GPU {gpu} {changed}: {'; and '.join(parts)}. Run `gpudesk mig list` to see "
            f"its state, then apply the layout again once the cause is fixed, or "
            f"`gpudesk mig clear --gpu {gpu}`."
        )
    message = f"{exc.message} {note}"
    if isinstance(exc, NvidiaSmiError):
        return NvidiaSmiError(message, exc.kind, exc.argv, exc.returncode, exc.output)
    return NvidiaSmiTimeout(message) if isinstance(exc, NvidiaSmiTimeout) else MigError(message)


def split_profiles(profiles: Sequence[str] | str) -> list[str]:
    """ "3g.20gb,1g.5gb" (or several such arguments) as a list of names."""
    items = [profiles] if isinstance(profiles, str) else list(profiles)
    return [name.strip() for item in items for name in item.split(",") if name.strip()]
