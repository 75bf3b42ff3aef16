"""`gpudesk select`: run a selection pre-pass on a dataset, and see or clear the cache."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpudesk.cli.common import engine_client, factory_kwargs, fail
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.cli.plot_output import PLOT_HELP, plot_target
from gpudesk.cli.std_streams import already_done
from gpudesk.text import json_text, printable_line, unsafe_char

if TYPE_CHECKING:
    pass

select_app = typer.Typer(
    help="Data selection presets, cached and shared across jobs.", no_args_is_help=True
)


LIST_HINT = "gpudesk select list shows it"


def _cache() -> Any:
    """The selection cache this command uses (SelectionCache.used_with): its home's; on a
    station root's in the state folder its engine names, a member's in her own gpudesk home."""
    from gpudesk.api.state_home import state_home
    from gpudesk.cli.common import current_home
    from gpudesk.selection.cache import SelectionCache

    return SelectionCache.used_with(state_home(current_home()))


def _not_written(cache: Any, exc: OSError) -> NoReturn:
    """A cache this command could not change: one paragraph, exit 1. A member's on a shared
    station is in her own gpudesk home: say where that is found and how to move it."""
    from gpudesk.cli.common import current_home
    from gpudesk.cli.report_file import inside

    # a name relative to the cache (rmtree's, by its folder's descriptor), or one in it or on its
    # way is the cache's; another (a file the dataset's factory reads) is not
    named, root = os.fsdecode(exc.filename or ""), str(cache.root)
    if not named or (os.path.isabs(named) and not (inside(named, root) or inside(root, named))):
        raise exc
    where = printable_line(str(cache.root / named))
    said = f"the selection cache {printable_line(str(cache.root))} could not be changed: {where}: "
    said += exc.strerror or str(exc)
    if current_home().is_system and os.geteuid() != 0:
        # GPUDESK_HOME, not named as a remedy: without GPUDESK_SOCKET it leaves the station
        said += (
            ". On a shared station each member's selections are cached in her own gpudesk home "
            "($XDG_STATE_HOME/gpudesk, else ~/.local/state/gpudesk; GPUDESK_HOME where set): "
            "make that folder yours and writable, or set XDG_STATE_HOME to a folder of yours "
            '(docs/shared-station.md, "The selection cache on a station")'
        )
    elif current_home().is_system and isinstance(exc, FileNotFoundError):
        said += (
            ". The station's selections are cached in the state folder its engine names, and "
            "no engine answers at its socket to name it: start it first (`gpudesk engine status`)"
        )
    fail(said, EXIT_FAILED)


def _report_problems(cache: Any) -> None:
    for problem in cache.problems:
        print(f"warning: {problem}", file=sys.stderr)


def _dataset_settings(
    dataset: str, profile: Path | None, args: list[str], target: str | None, target_args: list[str]
) -> dict[str, Any]:
    """factory, its kwargs, the target set's and the seed: the dataset's settings (from a
    profile, the running engine, or just MODULE:FACTORY) with the command line's on top."""
    from gpudesk.core.datasets import DatasetSpec

    if profile is not None:
        spec = _profile_dataset(dataset, profile)
    elif ":" not in dataset:
        spec = _registered_dataset(dataset)
    else:
        spec = DatasetSpec("cli", dataset)
    return {
        "factory": spec.factory,
        "kwargs": {**spec.args, **factory_kwargs(args)},
        "target": target or spec.selection_target,
        "seed": spec.seed,
        "target_kwargs": {**spec.selection_target_args, **factory_kwargs(target_args)},
    }


def _profile_dataset(name: str, profile: Path) -> Any:
    """A [datasets.NAME] table of a profile, as a loader spec."""
    from gpudesk.profile import ProfileError, load_profile

    try:
        loaded = load_profile(profile)
    except ProfileError as exc:
        fail(f"the profile is not valid:\n{exc}", EXIT_USAGE)
    config = loaded.datasets.get(name)
    if config is None or config.loader is None:
        known = ", ".join(sorted(n for n, d in loaded.datasets.items() if d.loader)) or "none"
        fail(
            f"{profile} has no [datasets.{name}] table with a factory (it has: {known})", EXIT_USAGE
        )
    return config.loader


def _registered_dataset(name: str) -> Any:
    """A dataset the engine knows by name (registered by a profile's run)."""
    from gpudesk.api.errors import EngineError
    from gpudesk.api.submit import registered_datasets

    hint = (
        f"'{printable_line(name)}': give the dataset as MODULE:FACTORY, or name a [datasets] "
        "table of a profile with --profile"
    )
    try:
        with engine_client(autostart=False) as client:
            specs = registered_datasets(client)
    except EngineError:
        fail(f"{hint} (no engine runs here to ask for its datasets)", EXIT_USAGE)
    for spec in specs:
        if spec.name == name:
            return spec
    known = ", ".join(spec.name for spec in specs) or "none"
    fail(
        f"{hint}; the engine knows no dataset '{printable_line(name)}' (it knows: {known})",
        EXIT_USAGE,
    )


DatasetArgument = Annotated[
    str,
    typer.Argument(
        help="MODULE:FACTORY returning a map-style dataset "
        "of (sample, label) pairs, or with --profile the "
        "name of one of its [datasets] tables."
    ),
]
PresetOption = Annotated[
    str,
    typer.Option(
        "--preset",
        help="METHOD-PERCENT[-perclass], e.g. random-25, el2n-25, coverage-25, less-25-perclass, "
        "or full.",
    ),
]
SeedOption = Annotated[
    int | None,
    typer.Option(
        "--seed",
        min=-(2**63),
        max=2**63 - 1,
        help="The selection's seed (default: the dataset's own, as its loader uses; else 0).",
    ),
]
VerifyOption = Annotated[
    bool,
    typer.Option(
        "--verify",
        help="Read every sample to fingerprint the dataset, even when it was indexed before.",
    ),
]
RecordReuseOption = Annotated[
    bool,
    typer.Option(
        "--record-reuse/--no-record-reuse",
        hidden=True,
        help="Count a cache hit as a use (compare's pre-pass check does not).",
    ),
]


@select_app.command("run")
def run_command(
    dataset: DatasetArgument,
    preset: PresetOption,
    profile: Annotated[
        Path | None,
        typer.Option("--profile", help="Read the dataset's settings from this profile."),
    ] = None,
    arg: Annotated[
        list[str],
        typer.Option("--arg", help="key=value for the factory (repeatable; JSON values)."),
    ] = [],  # noqa: B006
    target: Annotated[
        str | None,
        typer.Option("--target", help="MODULE:FACTORY of the target set (less-P ranks by it)."),
    ] = None,
    target_arg: Annotated[
        list[str],
        typer.Option("--target-arg", help="key=value for the target factory (repeatable)."),
    ] = [],  # noqa: B006
    seed: SeedOption = None,
    verify: VerifyOption = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one line of JSON.")] = False,
    record: RecordReuseOption = True,
) -> None:
    """Compute (or reuse) a preset's ordering for a dataset and say what it keeps."""
    from gpudesk.selection.apply import select
    from gpudesk.selection.preset_names import PresetError, parse_preset

    try:
        chosen = parse_preset(preset)
    except PresetError as exc:
        fail(str(exc), EXIT_USAGE)
    settings = _dataset_settings(dataset, profile, arg, target, target_arg)
    data, aim = _built(settings)
    cache = _cache()
    seed = settings["seed"] if seed is None else seed
    identity = {"factory": settings["factory"], "kwargs": settings["kwargs"]}
    try:
        used_by = _reuser() if record else None
        selection = select(
            data,
            chosen,
            cache,
            target=aim,
            seed=seed,
            used_by=used_by,
            identity=identity,
            verify=verify,
        )
        about = selection.describe()
        if about["key"] is not None and not about["reused"] and (job := _engine_job()):
            cache.note_job(about["key"], job)  # its measurement to come (`select show`)
    except PresetError as exc:
        fail(str(exc), EXIT_FAILED)
    except OSError as exc:  # the cache could not be written (a home on a read-only disk)
        _not_written(cache, exc)
    _report_problems(cache)
    if about["key"] is not None and not about["reused"]:
        already_done("the selection was computed and cached all the same: " + LIST_HINT)
    result = {"dataset": settings["factory"], "fingerprint": selection.fingerprint, **about}
    if as_json:
        print(json_text(result, separators=(",", ":")))
        return
    how = (
        "no pre-pass"
        if about["key"] is None
        else "reused from the cache"
        if about["reused"]
        else "computed and cached"
    )
    print(
        f"{chosen.name} of {settings['factory']}: keeps {about['kept']} of {about['of']} "
        f"samples ({how}, key {about['key'] or '-'}, {about['select_s']:.3f} s)"
    )


def _built(settings: dict[str, Any]) -> tuple[Any, Any]:
    """The dataset and the target set (None: none) `settings` name; a factory that fails is
    said in one line."""
    from gpudesk.loader.producer_config import load_factory
    from gpudesk.loader.protocol import LoaderError

    try:
        data = load_factory(settings["factory"])(**settings["kwargs"])
        aim = (
            load_factory(settings["target"])(**settings["target_kwargs"])
            if settings["target"]
            else None
        )
    except LoaderError as exc:
        fail(str(exc), EXIT_USAGE)
    except Exception as exc:  # the user's factory failed: say so, without a traceback
        fail(f"{settings['factory']} failed to build the dataset: {type(exc).__name__}: {exc}")
    return data, aim


def _engine_job() -> int | None:
    """The engine job this command runs as (GPUDESK_JOB_ID, which the engine sets), if any."""
    job = os.environ.get("GPUDESK_JOB_ID", "")
    return int(job) if job.isascii() and job.isdigit() else None


def _reuser() -> str:
    """Who a cache hit is credited to: the engine job running this, else this command."""
    job = os.environ.get("GPUDESK_JOB_ID")
    return f"job {job}" if job else f"gpudesk select run at {time.strftime('%Y-%m-%d %H:%M:%S')}"


@select_app.command("presets")
def presets_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The selection methods: what each computes and what its pre-pass costs."""
    import shutil
    import textwrap

    from gpudesk.selection.preset_names import ABOUT, METHODS, QUOTAS_NOTE

    rows = [
        {
            "method": m,
            "preset": "full" if m == "full" else f"{m}-P",
            "computes": ABOUT[m][0],
            "cost": ABOUT[m][1],
        }
        for m in METHODS
    ]
    if as_json:
        print(json_text({"presets": rows, "quotas": QUOTAS_NOTE}, indent=2))
        return
    width = max(40, min(100, shutil.get_terminal_size().columns) - 2)
    for row in rows:
        print(row["preset"])
        for label, text in (("keeps", row["computes"]), ("cost", row["cost"])):
            print(
                textwrap.fill(
                    text, width, initial_indent=f"  {label:<6}", subsequent_indent=" " * 8
                )
            )
    print()
    print(textwrap.fill(QUOTAS_NOTE, width))
    print(textwrap.fill("P is the percent kept (1-100); docs/selection.md has the details.", width))


@select_app.command("list")
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The cached orderings: dataset fingerprint, method, parameters, cost, reuses."""
    cache = _cache()
    entries = cache.entries()
    _report_problems(cache)
    rows = [
        {
            "key": e.key,
            "fingerprint": e.fingerprint,
            "method": e.method,
            "params": e.params,
            "proxy": e.proxy,
            "samples": len(e.order),
            "wall_s": round(e.cost.wall_s, 4),
            "cpu_s": round(e.cost.cpu_s, 4),
            "energy_j": e.cost.energy_j,
            "reuses": len(e.reused_by),
            "created_at": e.created_at,
        }
        for e in entries
    ]
    if as_json:
        print(json_text({"entries": rows}, indent=2))
        return
    if not rows:
        print("the selection cache is empty (`gpudesk select run` fills it)")
        return
    from gpudesk import render

    print(
        render.table(
            ("KEY", "DATASET", "SAMPLES", "PARAMS", "PRE-PASS", "REUSES"),
            [
                (
                    r["key"],
                    r["fingerprint"][:16],
                    r["samples"],
                    _short(r["params"]),
                    render.duration(r["wall_s"]),
                    r["reuses"],
                )
                for r in rows
            ],
        )
    )


def _short(params: dict[str, Any]) -> str:
    """The parameters that tell entries apart, briefly (`select show` has them all)."""
    shown = []
    for key, value in params.items():
        if key == "quotas":
            continue
        text = str(value)
        shown.append(f"{key}={text[:12] + '…' if len(text) > 13 else text}")
    return " ".join(shown)


KeyArgument = Annotated[str, typer.Argument(help="A key from `gpudesk select list`.")]
PercentOption = Annotated[
    int | None,
    typer.Option(
        "--percent",
        min=1,
        max=100,
        metavar="P",
        help="Say which samples the entry keeps at P %: their class mix, and with --json "
        "the kept sample indices.",
    ),
]
ShowPresetOption = Annotated[
    str | None,
    typer.Option(
        "--preset",
        help="Like --percent, named as a preset of the entry's method (e.g. el2n-25).",
    ),
]
ShowJsonOption = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print JSON; with --percent or --preset it lists the kept sample indices, "
        "without, the whole ordering (most wanted first), as dataset positions.",
    ),
]


@select_app.command("show")
def show_command(
    key: KeyArgument,
    percent: PercentOption = None,
    preset: ShowPresetOption = None,
    as_json: ShowJsonOption = False,
) -> None:
    """One cached ordering: what it was computed from, who reused it, and what it keeps."""
    from gpudesk.cli.select_show import add_kept, entry_data, print_entry, with_job_measured

    if percent is not None and preset is not None:
        fail("give --percent or --preset, not both", EXIT_USAGE)
    cache = _cache()
    entry = cache.load(key)
    _report_problems(cache)
    if entry is None:
        fail(
            f"no selection cache entry '{printable_line(key)}' (see `gpudesk select list`)",
            EXIT_FAILED,
        )
    entry, unmeasured = with_job_measured(cache, entry)
    data = entry_data(entry) | {"job_unmeasured": unmeasured}
    chosen = f"{entry.method}-{percent}" if percent is not None else preset
    positions, kept = add_kept(data, cache, entry, chosen, as_json)
    if as_json:
        print(json_text(data, indent=2))
        return
    print_entry(entry, data, positions, kept)


@select_app.command("clear")
def clear_command() -> None:
    """Remove every cached ordering (they are recomputed when next asked for)."""
    cache = _cache()
    try:
        removed = cache.clear()
    except OSError as exc:
        _not_written(cache, exc)
    already_done("the selection cache was emptied all the same")
    print(f"removed {removed} selection cache entries")


ProfileArgument = Annotated[
    Path, typer.Argument(help="A profile whose training job reads a dataset with a factory.")
]
PresetsOption = Annotated[
    str | None,
    typer.Option(
        "--presets",
        help="Comma-separated presets (default: "
        "full,random-25,stratified-25,loss-25,el2n-25,coverage-25,dedup-25,less-25).",
        show_default=False,
    ),
]
SplitsOption = Annotated[
    int,
    typer.Option(
        "--splits",
        metavar="K",
        help="Redraw the train/val split K times: split k sets split_seed to the profile's "
        "value + k (its [datasets] args must hold split_seed when K > 1).",
    ),
]
SeedsOption = Annotated[
    int,
    typer.Option(
        "--seeds",
        metavar="N",
        help="Repeat each preset and split with seeds 0 .. N-1 (3 or more).",
    ),
]
JobOption = Annotated[
    str | None,
    typer.Option("--job", help="The profile's job to train (when several read a dataset)."),
]
MetricOption = Annotated[
    str, typer.Option("--metric", help="The key of the job's `result {json}` line to compare.")
]
LowerIsBetterOption = Annotated[
    bool,
    typer.Option("--lower-is-better", help="The metric is a loss or an error: lower is better."),
]
OutOption = Annotated[
    Path | None, typer.Option("--out", help="Also write everything measured here, as JSON.")
]
CompareJsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON instead of the tables.")
]
PlotOption = Annotated[
    str | None,
    typer.Option(
        "--plot",
        metavar="FILE",
        help="Also draw quality against cost per preset, and the break-even. " + PLOT_HELP,
    ),
]
ApplyStationOption = Annotated[
    bool,
    typer.Option(
        "--apply-station",
        help="Apply the profile's [station] settings to the engine (they stay after the "
        "comparison). Without it, the comparison says which differ.",
    ),
]


@select_app.command(
    "compare",
    help=(
        "Train the profile's job under each preset, split and seed; print the cost-vs-quality "
        "tables.\n\n"
        "Jobs run one at a time on the engine: each preset's pre-pass (`gpudesk select run`), then "
        "the training job on the shared loader under that selection. Split k sets split_seed in "
        "the dataset's (and its target's) factory arguments; seed j shifts the dataset's seed. "
        "Quality is a mean ± sd over all runs, and each preset at P % is compared with random-P "
        "run for run (a paired t-test at 95 %: better than random, WORSE than random, or no "
        "different). Pre-pass cost is shown fresh and amortized over the training jobs that used "
        "the cached entry; break-even is how many training runs on the subset pay the pre-pass "
        "back in wall time."
    ),
)
def compare_command(
    profile: ProfileArgument,
    presets: PresetsOption = None,
    splits: SplitsOption = 3,
    seeds: SeedsOption = 3,
    job: JobOption = None,
    metric: MetricOption = "val_acc",
    lower_is_better: LowerIsBetterOption = False,
    out: OutOption = None,
    as_json: CompareJsonOption = False,
    plot: PlotOption = None,
    apply_station: ApplyStationOption = False,
) -> None:
    from gpudesk.cli import compare
    from gpudesk.cli import select_compare as steps

    if not metric.strip() or unsafe_char(metric) is not None:  # before the runs, too
        fail(
            f"--metric: '{printable_line(metric)}' names no key of a job's `result {{json}}` "
            "line: give one, e.g. --metric val_acc or --metric loss --lower-is-better",
            EXIT_USAGE,
        )
    target = plot_target(plot, machine_output="--json" if as_json else None)
    if out is not None:  # before the runs, which take minutes to hours (as run --report)
        from gpudesk.cli.report_file import check_report_path, gpudesk_homes

        check_report_path(out, profile=profile, homes=gpudesk_homes(), option="--out")
    chosen = steps.plan(
        profile,
        compare.DEFAULT_PRESETS if presets is None else presets,
        seeds,
        job,
        metric,
        splits=splits,
        higher_is_better=not lower_is_better,
    )
    steps.note_few_runs(splits, seeds)
    trials, station = steps.run(chosen, _cache(), apply_station=apply_station)
    problems = steps.report(
        chosen, trials, station, metric, out=out, as_json=as_json, target=target
    )
    if problems:
        raise typer.Exit(EXIT_FAILED)
