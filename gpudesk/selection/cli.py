"""`gpudesk select`: run a selection pre-pass on a dataset, and see or clear the cache."""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import typer

select_app = typer.Typer(help="Data selection presets, cached and shared across jobs.",
                         no_args_is_help=True)


def _cache() -> Any:
    from gpudesk.paths import Home
    from gpudesk.selection.cache import SelectionCache

    return SelectionCache(Home.from_env().selection_dir)


def _report_problems(cache: Any) -> None:
    for problem in cache.problems:
        print(f"warning: {problem}", file=sys.stderr)


@select_app.command("run")
def run_command(
    dataset: Annotated[str, typer.Option("--dataset", help="MODULE:FACTORY returning a "
                                         "map-style dataset of (sample, label) pairs.")],
    preset: Annotated[str, typer.Option("--preset", help="METHOD-PERCENT, e.g. random-25, "
                                        "stratified-25, or full.")],
    arg: Annotated[list[str], typer.Option("--arg", help="key=value for the factory "
                                           "(repeatable; JSON values).")] = [],  # noqa: B006
    seed: Annotated[int, typer.Option("--seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Compute (or reuse) a preset's ordering for a dataset and say what it keeps."""
    import numpy as np

    from gpudesk.cli import EXIT_FAILED, EXIT_USAGE, fail
    from gpudesk.loader.cli import factory_kwargs
    from gpudesk.loader.producer import load_factory
    from gpudesk.loader.protocol import LoaderError
    from gpudesk.selection.fingerprint import fingerprint
    from gpudesk.selection.prepass import SCORED, prepare
    from gpudesk.selection.presets import PresetError, parse_preset

    try:
        chosen = parse_preset(preset)
    except PresetError as exc:
        fail(str(exc), EXIT_USAGE)
    try:
        data = load_factory(dataset)(**factory_kwargs(arg))
    except LoaderError as exc:
        fail(str(exc), EXIT_USAGE)
    except Exception as exc:  # the user's factory failed: say so, without a traceback
        fail(f"{dataset} failed to build the dataset: {type(exc).__name__}: {exc}")
    started = time.perf_counter()
    try:
        labels = np.asarray([int(data[i][1]) for i in range(len(data))], dtype=np.int64)
    except (TypeError, IndexError, ValueError) as exc:
        fail(f"{dataset}: selection needs samples of (input, integer label): {exc}",
             EXIT_USAGE)
    digest = fingerprint(data)
    inputs = None
    if chosen.method in SCORED:
        from gpudesk.selection.scoring import features

        inputs = features(data)[0]
    cache = _cache()
    try:
        selection = prepare(chosen, labels, digest, cache, seed=seed, inputs=inputs,
                            used_by=f"gpudesk select run at {time.strftime('%Y-%m-%d %H:%M:%S')}")
    except PresetError as exc:
        fail(str(exc), EXIT_FAILED)
    _report_problems(cache)
    result = {"dataset": dataset, "fingerprint": digest, "preset": chosen.name,
              "key": selection.key, "reused": selection.reused, "kept": len(selection.indices),
              "of": len(labels), "wall_s": round(time.perf_counter() - started, 3),
              "prepass_wall_s": round(selection.cost.wall_s, 4)}
    if as_json:
        print(json.dumps(result, indent=2))
        return
    how = "reused from the cache" if selection.reused else "computed and cached"
    print(f"{chosen.name} of {dataset}: keeps {result['kept']} of {result['of']} samples "
          f"({how}, key {selection.key or '-'}); fingerprint {digest}")


@select_app.command("list")
def list_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
                 ) -> None:
    """The cached orderings: dataset fingerprint, method, parameters, cost, reuses."""
    cache = _cache()
    entries = cache.entries()
    _report_problems(cache)
    rows = [{"key": e.key, "fingerprint": e.fingerprint, "method": e.method,
             "params": e.params, "proxy": e.proxy, "samples": len(e.order),
             "wall_s": round(e.cost.wall_s, 4), "cpu_s": round(e.cost.cpu_s, 4),
             "energy_j": e.cost.energy_j, "reuses": len(e.reused_by),
             "created_at": e.created_at} for e in entries]
    if as_json:
        print(json.dumps({"entries": rows}, indent=2))
        return
    if not rows:
        print("the selection cache is empty (`gpudesk select run` fills it)")
        return
    from gpudesk import render

    print(render.table(("KEY", "METHOD", "PARAMS", "SAMPLES", "PRE-PASS", "REUSES"),
                       [(r["key"], r["method"], json.dumps(r["params"]), r["samples"],
                         render.duration(r["wall_s"]), r["reuses"]) for r in rows]))


@select_app.command("show")
def show_command(key: Annotated[str, typer.Argument(help="A key from `gpudesk select list`.")],
                 as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
                 ) -> None:
    """One cached ordering: what it was computed from and who reused it."""
    from gpudesk.cli import EXIT_FAILED, fail

    cache = _cache()
    entry = cache.load(key)
    _report_problems(cache)
    if entry is None:
        fail(f"no selection cache entry {key!r} (see `gpudesk select list`)", EXIT_FAILED)
    data = {"key": entry.key, "fingerprint": entry.fingerprint, "method": entry.method,
            "params": entry.params, "proxy": entry.proxy, "samples": len(entry.order),
            "stratified": entry.labels is not None, "cost": vars(entry.cost),
            "created_at": entry.created_at, "reused_by": entry.reused_by}
    if as_json:
        print(json.dumps(data, indent=2))
        return
    for name, value in data.items():
        print(f"{name:<12} {value}")


@select_app.command("clear")
def clear_command() -> None:
    """Remove every cached ordering (they are recomputed when next asked for)."""
    print(f"removed {_cache().clear()} selection cache entries")
