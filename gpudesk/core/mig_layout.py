"""Planning a MIG layout that the hardware's placement rules allow: which profile a name means,
where each instance may sit, and the order that makes a set that fits on paper fit in practice;
and MIG's errors (what nvidia-smi itself fails with is gpudesk.hw.mig.nvidia_smi's). Pure: the
planner and the driver both use it."""

from __future__ import annotations

import difflib
import math
from collections import Counter
from collections.abc import Mapping, Sequence

from gpudesk.core.mig_profiles import SliceSpan, short_name
from gpudesk.core.mig_records import GiProfile, PlannedInstance


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


# ---------------------------------------------------------------------------------- layouts


def resolve_profile(profiles: Sequence[GiProfile], name: str) -> GiProfile:
    """A profile by short name ("3g.20gb"), full name ("MIG 3g.20gb") or ID ("9")."""
    wanted = name.strip()
    for profile in profiles:
        if wanted in (profile.short_name, profile.name, str(profile.id)):
            return profile
    lowered = short_name(wanted).lower()
    for profile in profiles:
        if profile.short_name.lower() == lowered:
            return profile
    names = [p.short_name for p in profiles]
    suggestions = difflib.get_close_matches(short_name(wanted), names, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(suggestions)}?" if suggestions else ""
    listed = ", ".join(f"{p.short_name} (ID {p.id})" for p in profiles) or "none"
    raise UnknownProfileError(
        f"unknown MIG profile {name!r}.{hint} This GPU offers: {listed}.", name, suggestions
    )


def derive_placements(profiles: Sequence[GiProfile]) -> dict[int, tuple[SliceSpan, ...]]:
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
        derived[p.id] = tuple(SliceSpan(k * spans[p.id], spans[p.id]) for k in range(count))
    return derived


def _check_counts(
    chosen: Sequence[GiProfile], spots: Mapping[int, Sequence[SliceSpan]], listed: str
) -> None:
    """Each profile asked no more often than the GPU holds it, and with somewhere to sit."""
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


def plan_layout(
    profiles_available: Sequence[GiProfile],
    requested: Sequence[str],
    placements: Mapping[int, Sequence[SliceSpan]],
    occupied: Sequence[SliceSpan] = (),
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
    _check_counts(chosen, spots, listed)
    compute_total = max((p.compute_slices for p in profiles_available), default=0)

    def size(p: GiProfile) -> int:
        return max(pl.size for pl in spots[p.id])

    order = sorted(
        range(len(chosen)),
        key=lambda i: (-size(chosen[i]), -chosen[i].compute_slices, -chosen[i].memory_gib, i),
    )
    ordered = [chosen[i] for i in order]

    def fit(
        items: list[GiProfile], used: tuple[SliceSpan, ...], compute: int
    ) -> list[SliceSpan] | None:
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


def split_profiles(profiles: Sequence[str] | str) -> list[str]:
    """ "3g.20gb,1g.5gb" (or several such arguments) as a list of names."""
    items = [profiles] if isinstance(profiles, str) else list(profiles)
    return [name.strip() for item in items for name in item.split(",") if name.strip()]
