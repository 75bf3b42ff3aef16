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

import re
import shlex
from collections.abc import Mapping, Sequence

from gpudesk.core.mig_layout import (
    MigError,
)
from gpudesk.core.mig_profiles import SliceSpan, short_name
from gpudesk.core.mig_records import (
    ComputeInstance,
    GiProfile,
    GpuEntry,
    GpuInstance,
    MigEntry,
    MigMode,
    MigSlot,
    ProfilePlacements,
)

ENV_NVIDIA_SMI = "GPUDESK_NVIDIA_SMI"
DEFAULT_TIMEOUT = 60.0  # seconds per nvidia-smi call; creating instances can take a while
# NvidiaSmiError kinds that mean "this GPU cannot be partitioned now", not "nvidia-smi failed"
MIG_MODE_KINDS = ("mig-disabled", "mig-pending", "mig-unsupported")


# ----------------------------------------------------------------------------------- errors
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
                short_name=short_name(name),
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
                int(match.group(1)), int(match.group(2)), tuple(SliceSpan(s, size) for s in starts)
            )
        )
    return result


EMPTY_GI = "No GPU instances found"
EMPTY_CI = "No compute instances found"


def _id_columns(
    tokens: list[str], leading: int, line: str, what: str
) -> tuple[str, int, int, SliceSpan | None]:
    """Name, profile ID, instance ID and placement from a row whose first `leading` tokens are
    IDs, followed by a multi-word name, then profile ID, instance ID and (newer drivers)
    a placement."""
    try:
        placement = SliceSpan.parse(tokens[-1]) if ":" in tokens[-1] else None
        ids = tokens[:-1] if placement else tokens
        name = " ".join(ids[leading:-2])
        if not name:
            raise ValueError("no name")
        return name, int(ids[-2]), int(ids[-1]), placement
    except (ValueError, IndexError) as exc:
        raise _parse_error(what, line, str(exc)) from None


def parse_gpu_instances(text: str) -> list[GpuInstance]:
    """`nvidia-smi mig -lgi`; "No GPU instances found" is an empty list."""
    if text.strip().startswith(EMPTY_GI):
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
    if text.strip().startswith(EMPTY_CI):
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
SUCCESS_LINE = re.compile(r"Successfully (created|destroyed) .*")


def parse_created_gpu_instances(text: str) -> list[tuple[int, str]]:
    """(GPU instance ID, short profile name) of each "Successfully created GPU instance" line of
    `nvidia-smi mig -cgi` output, failed runs included."""
    return [(int(m.group(1)), short_name(m.group(3))) for m in _CREATED_GI.finditer(text)]


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
