"""What `gpudesk select show` says of one cached ordering: what it was computed from and at what
cost, who reused it, what a preset of it keeps (with --json, the sample indices), and its class
mix.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gpudesk.cli.common import fail
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.units import J_PER_WH

if TYPE_CHECKING:
    from gpudesk.cli.select_kept import DatasetPositions, Kept
    from gpudesk.selection.cache import Entry, SelectionCache


def with_job_measured(cache: SelectionCache, entry: Entry) -> tuple[Entry, str | None]:
    """The entry, with what the engine measured of the job that computed it recorded where it
    names the job but not yet its measurement (a run left to the engine, `gpudesk run
    --detach`, that no `gpudesk run --attach` followed): asked of the engine now. Else, with
    why it is not in (None: nothing was missing)."""
    from gpudesk.api.errors import EngineError
    from gpudesk.api.prepass import record_prepass
    from gpudesk.cli.common import engine_client

    job_id = entry.cost.job
    if job_id is None or entry.cost.job_wall_s is not None:
        return entry, None
    try:
        with engine_client(autostart=False) as client:
            found = [j for j in client.jobs(ids=[job_id], usage=True) if j.id == job_id]
    except EngineError:
        return entry, "its engine is not running to be asked"
    if not found:
        return entry, "its engine no longer has it"
    job = found[0]
    if job.ended_at is None:
        return entry, f"it is {job.state}"
    try:  # into the entry the job's output names: this one, unless another engine's job
        output = record_prepass(cache, job)
    except OSError as exc:  # a cache it may read but not write: shown, not kept
        return entry, f"measured, but not recorded: {exc.strerror or exc}"
    if output is None or output.get("key") != entry.key:
        return entry, f"the engine's job {job_id} did not compute this entry"
    return cache.load(entry.key) or entry, None


def entry_data(entry: Entry) -> dict[str, Any]:
    """The entry's fields, as --json prints them."""
    labelled = entry.labels is not None
    data: dict[str, Any] = {
        "key": entry.key,
        "fingerprint": entry.fingerprint,
        "method": entry.method,
        "params": entry.params,
        "proxy": entry.proxy,
        "samples": len(entry.order),
        # stored labels make quotas possible; whether a subset uses them is the preset's
        # choice (stratified always, a scored method only as METHOD-P-perclass)
        "quotas": (
            "per class"
            if entry.method == "stratified"
            else "per class with -perclass, else none"
            if labelled
            else "none"
        ),
        "labels": "stored"
        if labelled
        else f"none: a {entry.method} entry stores no labels, so no class mix",
        "notes": entry.notes,
        "cost": vars(entry.cost),
        "created_at": entry.created_at,
        "reused_by": entry.reused_by,
    }
    return data


def add_kept(
    data: dict[str, Any], cache: SelectionCache, entry: Entry, chosen: str | None, as_json: bool
) -> tuple[DatasetPositions, Kept | None]:
    """The entry's dataset positions, and what the preset `chosen` keeps (None: no preset);
    with --json and no preset, the whole ordering, added to `data`. Returns the positions and
    what is kept (None without a preset)."""
    from gpudesk.cli.select_kept import class_counts, kept_of, positions_for
    from gpudesk.selection.preset_names import PresetError

    positions = positions_for(cache, entry.fingerprint)
    data["positions"] = positions.to_dict()
    if entry.labels is not None:
        data["per_class"] = class_counts(entry.labels)
    kept = None
    if chosen is not None:
        try:
            kept = kept_of(entry, chosen)
        except PresetError as exc:
            fail(f"--preset: {exc}", EXIT_USAGE)
        data["preset"] = kept.preset
        data["kept"] = sorted(int(i) for i in positions.of(kept.canonical))
        data["kept_per_class"] = (
            class_counts(entry.labels, kept.canonical) if entry.labels is not None else None
        )
    elif as_json:
        data["ordering"] = [int(i) for i in positions.of(entry.order)]
    return positions, kept


def print_entry(
    entry: Entry, data: dict[str, Any], positions: DatasetPositions, kept: Kept | None
) -> None:
    """The entry as labelled lines, then its class mix where it stores labels."""
    labelled = entry.labels is not None
    from gpudesk import render

    cost = entry.cost
    lines = [
        ("key", entry.key),
        ("method", entry.method),
        ("params", json.dumps(entry.params)),
        ("proxy", entry.proxy or "-"),
        ("fingerprint", entry.fingerprint),
        ("samples", f"{len(entry.order)} (quotas: {data['quotas']})"),
        ("positions", positions.note),
        (
            "computed",
            f"{render.clock(entry.created_at)} in {cost.wall_s:.2f} s ({cost.cpu_s:.2f} CPU-s)",
        ),
        (
            "as a job",
            "-"
            if cost.job is None
            else f"job {cost.job}: not measured yet ({data['job_unmeasured']})"
            if data.get("job_unmeasured")
            else f"job {cost.job}: {render.duration(cost.job_wall_s)} wall, "
            + ("energy n/a" if cost.energy_j is None else f"{cost.energy_j / J_PER_WH:.4f} Wh"),
        ),
        (
            "reused by",
            f"{len(entry.reused_by)} job(s)"
            + "".join(f"\n             {who}" for who in entry.reused_by[-10:]),
        ),
    ]
    if entry.notes:
        lines.append(("notes", json.dumps(entry.notes)))
    if kept is not None:
        lines.append(
            (
                kept.preset,
                f"keeps {len(kept.canonical)} of {len(entry.order)} (--json lists them)",
            )
        )
    if not labelled:
        lines.append(("classes", data["labels"]))
    for name, value in lines:
        print(f"{name:<12} {value}")
    if labelled:
        print()
        mix = _class_mix(
            data["per_class"], kept.preset if kept else None, data.get("kept_per_class")
        )
        print(mix)


def _class_mix(whole: dict[int, int], preset: str | None, kept: dict[int, int] | None) -> str:
    """The class mix of the data and, at a percent, of the kept set and its share of each
    class against the data's (1.00: as in the data; 2.00: twice as common)."""
    from gpudesk import render

    labels = list(whole)
    rows: list[list[object]] = [["data", *whole.values()]]
    if kept is not None and preset is not None:
        total_kept = sum(kept.values()) or 1
        total = sum(whole.values()) or 1
        rows.append([f"{preset} keeps", *(kept.get(label, 0) for label in labels)])
        rows.append(
            [
                "share vs data",
                *(
                    f"{(kept.get(label, 0) / total_kept) / (whole[label] / total):.2f}"
                    for label in labels
                ),
            ]
        )
    return render.table(["CLASS", *map(str, labels)], rows, right=range(1, len(labels) + 1))
