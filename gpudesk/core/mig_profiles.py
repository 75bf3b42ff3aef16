"""The one home of MIG profile facts: NVIDIA's GPU instance profile tables per GPU model, their
placement rules (which memory slices an instance may start at), and reading profile names.

A MIG GPU has 7 compute slices and 8 memory slices. A profile's name says its compute slices and
its memory ("3g.20gb": 3 compute slices, 20 GB); the table says its memory slices, its profile ID
(what `nvidia-smi mig -cgi` takes) and where it may sit. The tables follow NVIDIA's MIG user guide
and the real `nvidia-smi mig -lgip / -lgipp` output in tests/fixtures/nvidia-smi/: a profile of m
memory slices starts at multiples of m, as many times as both the memory and compute slices allow
(1g.5gb {0..6}:1, 2g.10gb {0,2,4}:2, 3g.20gb {0,4}:4, 4g.20gb {0}:4, 7g.40gb {0}:8 on an A100);
a "+me" profile (with the media engines) sits where its plain twin does, once per GPU.

Stdlib and gpudesk.units only: the parsers, the planner, placement, the simulated backend and
the simulator all read it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from gpudesk.units import MIB_PER_GB

COMPUTE_SLICES = 7  # per MIG GPU (A100, H100, H200)
MEMORY_SLICES = 8
# A simulated profile without a measured memory figure holds this share of its name's GB (the
# driver keeps the rest), close to what real lgip output shows.
NOMINAL_MEMORY_SHARE = 0.98

PLAIN_PROFILE_NAME = re.compile(r"^[1-7]g\.[0-9]{1,3}gb$")

A100_40GB = "A100-40GB"
A100_80GB = "A100-80GB"
H100_80GB = "H100-80GB"
H200_141GB = "H200-141GB"


class SliceSpan(msgspec.Struct, frozen=True):
    """Where a MIG instance sits: `size` slices from `start` (memory slices for GPU instances,
    compute slices within the GPU instance for compute instances). nvidia-smi prints it
    `start:size`."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: SliceSpan) -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"

    @classmethod
    def parse(cls, text: str) -> SliceSpan:
        match = re.fullmatch(r"(\d+):(\d+)", text.strip())
        if not match:
            raise ValueError(f"not a start:size placement: {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))


class MigProfile(msgspec.Struct, frozen=True):
    """One GPU instance profile of one GPU model."""

    name: str  # "3g.20gb"
    id: int  # nvidia-smi's GPU instance profile ID
    compute_slices: int
    memory_slices: int
    memory_mib: float  # what a MIG device of this profile reports as its total memory
    instances: int  # at most this many on one GPU
    starts: tuple[int, ...]  # the memory slices an instance may start at
    # Offered by the simulated GPU of this model. The simulation mirrors the driver the fixtures
    # were taken with: no "+me" profiles (no media engines to simulate), and on the A100 40GB no
    # 1g.10gb (newer drivers only).
    simulated: bool = True

    @property
    def placements(self) -> tuple[SliceSpan, ...]:
        return tuple(SliceSpan(start, self.memory_slices) for start in self.starts)


def _profile(
    name: str, profile_id: int, memory_slices: int, memory_mib: float | None = None, **kw: bool
) -> MigProfile:
    """A table row; instances and starts follow from the slices, as the hardware's rules do."""
    compute = compute_slices(name)
    instances = min(MEMORY_SLICES // memory_slices, COMPUTE_SLICES // compute)
    starts = tuple(k * memory_slices for k in range(instances))
    if name.endswith("+me"):
        # one per GPU (there is one set of media engines), anywhere its plain twin may sit
        instances = 1
    if memory_mib is None:
        memory_mib = nominal_memory_mib(name)
    return MigProfile(name, profile_id, compute, memory_slices, memory_mib, instances, starts, **kw)


def _hopper_like(small: str, double: str, three: str, full: str) -> tuple[MigProfile, ...]:
    """The A100 80GB, H100 and H200 share one layout of IDs and slices; only the GB differ."""
    return (
        _profile(f"1g.{small}gb", 19, 1),
        _profile(f"1g.{small}gb+me", 20, 1, simulated=False),
        _profile(f"1g.{double}gb", 15, 2),
        _profile(f"2g.{double}gb", 14, 2),
        _profile(f"3g.{three}gb", 9, 4),
        _profile(f"4g.{three}gb", 5, 4),
        _profile(f"7g.{full}gb", 0, 8),
    )


def nominal_memory_mib(name: str) -> float:
    """A profile's memory from its name's GB (for profiles without a measured figure)."""
    match = re.search(r"\.(\d+)gb", short_name(name))
    return float(match.group(1)) * MIB_PER_GB * NOMINAL_MEMORY_SHARE if match else 0.0


_MODEL_PATTERNS = (  # (pattern in a GPU's name, table), first match wins
    (re.compile(r"A100.*80\s*GB", re.IGNORECASE), A100_80GB),
    (re.compile(r"A100", re.IGNORECASE), A100_40GB),
    (re.compile(r"H100", re.IGNORECASE), H100_80GB),
    (re.compile(r"H200", re.IGNORECASE), H200_141GB),
)


def table_for_gpu(gpu_name: str) -> tuple[MigProfile, ...]:
    """The profile table of a GPU by its name ("NVIDIA A100-SXM4-40GB"); () when unknown."""
    for pattern, model in _MODEL_PATTERNS:
        if pattern.search(gpu_name):
            return PROFILE_TABLES[model]
    return ()


def short_name(name: str) -> str:
    """The profile in a profile or MIG device name: "3g.20gb" for "MIG 3g.20gb" and for
    "NVIDIA A100-SXM4-40GB MIG 3g.20gb"; other names unchanged."""
    head, sep, tail = name.rpartition("MIG ")
    return tail if sep and (not head or head.endswith(" ")) else name


def is_plain_profile_name(name: str) -> bool:
    """ "3g.20gb": a GPU instance profile name without "+me" or a compute-instance prefix (what
    a simulated station's `mig` table may list)."""
    return PLAIN_PROFILE_NAME.match(name) is not None


def compute_slices(name: str) -> int:
    """3 for "3g.20gb", 1 for "1g.5gb+me" or "MIG 1g.10gb"; 0 when the name does not say (a
    compute instance's "1c.3g.20gb", or no MIG profile at all)."""
    match = re.match(r"(\d+)g\.", short_name(name))
    return int(match.group(1)) if match else 0


def memory_slices(name: str, table: tuple[MigProfile, ...] | None = None) -> int:
    """A profile's memory slices in `table` (the carved profiles unless given); all of them for
    a name it does not have."""
    known = find_profile(name, CARVED_PROFILES if table is None else table)
    return known.memory_slices if known is not None else MEMORY_SLICES


def find_profile(name: str, table: tuple[MigProfile, ...]) -> MigProfile | None:
    wanted = short_name(name)
    return next((p for p in table if p.name == wanted), None)


# GPU model -> its profiles, in NVIDIA's order. The A100 40GB's memory is what its real lgip
# output and MIG devices report (4.75 / 9.75 / 19.62 / 39.50 GiB).
PROFILE_TABLES: dict[str, tuple[MigProfile, ...]] = {
    A100_40GB: (
        _profile("1g.5gb", 19, 1, 4864.0),
        _profile("1g.5gb+me", 20, 1, 4864.0, simulated=False),
        _profile("1g.10gb", 15, 2, 9984.0, simulated=False),
        _profile("2g.10gb", 14, 2, 9984.0),
        _profile("3g.20gb", 9, 4, 20096.0),
        _profile("4g.20gb", 5, 4, 20096.0),
        _profile("7g.40gb", 0, 8, 40448.0),
    ),
    A100_80GB: _hopper_like("10", "20", "40", "80"),
    H100_80GB: _hopper_like("10", "20", "40", "80"),
    H200_141GB: _hopper_like("18", "35", "71", "141"),
}

# The profiles placement carves on a simulated MIG GPU (and the trace simulator with it): the
# A100 40GB's, the station the research measured.
CARVED_PROFILES = tuple(p for p in PROFILE_TABLES[A100_40GB] if p.simulated)


def simulated_profiles(gpu_name: str) -> tuple[MigProfile, ...]:
    """The MIG profiles a simulated GPU of this model offers (its own table)."""
    return tuple(p for p in table_for_gpu(gpu_name) if p.simulated)


def layout_fits(profiles: Sequence[MigProfile]) -> bool:
    """Whether these instances fit one GPU together: 7 compute slices, and each at one of its
    profile's placements over the 8 memory slices, none overlapping (larger ones first, as the
    driver places them)."""
    if sum(p.compute_slices for p in profiles) > COMPUTE_SLICES:
        return False
    ordered = sorted(profiles, key=lambda p: (-p.memory_slices, -p.compute_slices))

    def fit(i: int, used: tuple[SliceSpan, ...]) -> bool:
        if i == len(ordered):
            return True
        return any(
            not any(spot.overlaps(u) for u in used) and fit(i + 1, (*used, spot))
            for spot in ordered[i].placements
        )

    return fit(0, ())


def layout_problem(names: Sequence[str], gpu_name: str) -> str | None:
    """Why these MIG instances cannot be a simulated `gpu_name`'s layout (a profile its model
    does not offer, or instances that do not fit it together); None when they can."""
    table = simulated_profiles(gpu_name)
    if not table:
        return f"a {gpu_name} has no MIG mode"
    found = []
    for name in names:
        profile = find_profile(name, table)
        if profile is None:
            offered = ", ".join(p.name for p in table)
            return f"a {gpu_name} has no MIG profile {name}; it offers {offered}"
        found.append(profile)
    if not layout_fits(found):
        return (
            f"{','.join(names)} does not fit a {gpu_name} ({COMPUTE_SLICES} compute and "
            f"{MEMORY_SLICES} memory slices, each profile only at its own placements)"
        )
    return None
