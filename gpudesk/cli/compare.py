"""`gpudesk select compare PROFILE --presets full,random-25,... --splits K --seeds N`: the
profile's training job under each data-selection preset, on K train/val splits and N seeds each,
run as engine jobs. gpudesk.cli.compare_report turns the trials into the table.

Each (split, seed, preset) runs as engine jobs, one at a time so their timings do not disturb
each other: first the pre-pass (`gpudesk select run`, skipped for `full` and `rs2`), whose wall
time, CPU time and energy the engine measures and this module writes into the cache entry; then
the training job, reading the dataset through the shared loader under that selection (a loader
of its own per split and seed, `NAME.pKsN.PRESET`). The job's quality is read from the last
`result {json}` line it prints (gpudesk.results; docs/results.md).

Split k sets `split_seed` in the dataset factory's arguments (and in its selection target's) to
the profile's value + k, so each split redraws the train/val partition; the job gets it as
$GPUDESK_SPLIT and in place of `{split}` in its command or env. Seed j shifts the dataset's seed
(selection and shuffle) by j and reaches the job as $GPUDESK_SEED and `{seed}`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from gpudesk.api.prepass import NO_PREPASS, Prepass, job_wall, record_prepass
from gpudesk.api.submit import (
    configure_station,
    register_datasets,
    said_at_their_tables,
    submit_specs,
    wait_for_jobs,
)
from gpudesk.cli.select_kept import class_counts, kept_of
from gpudesk.core.datasets import VARIANT_SEPARATOR, DatasetSpec
from gpudesk.core.jobs import JobSpec
from gpudesk.profile import Profile
from gpudesk.results import read_metrics
from gpudesk.selection.cache import SelectionCache
from gpudesk.selection.preset_names import Preset, PresetError, parse_preset
from gpudesk.text import quoted
from gpudesk.workloads.common import ENV_SEED, ENV_SPLIT

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import JobView

# coverage-P and dedup-P as issue 21 names them (the k-center ordering, and real near-duplicate
# removal); `gpudesk select presets` lists what this version knows.
DEFAULT_PRESETS = "full,random-25,stratified-25,loss-25,el2n-25,coverage-25,dedup-25,less-25"
POLL_S = 0.25
MAX_REPEATS = 20  # splits, and seeds: each multiplies the jobs the comparison runs
SPLIT_ARG = "split_seed"  # the factory argument a split redraws
LOADER_NAME_MAX = 40  # gpudesk.engine.services.loaders: a loader name is 1 to 40 characters


class CompareError(Exception):
    """The comparison cannot run as asked; the message says what to change."""


@dataclass(frozen=True)
class ComparePlan:
    profile: Profile
    job: JobSpec  # the training job, `{seed}` and `{split}` not yet replaced
    dataset: DatasetSpec  # the loader settings of the dataset it reads
    presets: list[Preset]
    splits: list[int]  # the split_seed of each split
    seeds: list[int]  # seed offsets 0 .. N-1
    metric: str
    higher_is_better: bool = True

    @property
    def sets_split(self) -> bool:
        """Whether the factory's arguments carry a split_seed this comparison sets."""
        return SPLIT_ARG in self.dataset.args

    def dataset_for(self, split: int, seed: int) -> DatasetSpec:
        """The dataset as split `split` and seed `seed` read it: its own loader, its train/val
        partition redrawn (split_seed), seeded differently."""
        args = dict(self.dataset.args)
        target_args = dict(self.dataset.selection_target_args)
        if self.sets_split:
            args[SPLIT_ARG] = split
            if self.dataset.selection_target is not None:
                target_args[SPLIT_ARG] = split
        return msgspec.structs.replace(
            self.dataset,
            name=self.loader_name(split, seed),
            args=args,
            seed=self.dataset.seed + seed,
            selection=None,
            selection_target_args=target_args,
        )

    def loader_name(self, split: int, seed: int) -> str:
        """NAME.pKsN, short enough that the engine's per-preset loader (NAME.pKsN.PRESET) keeps
        it whole: a cut name would let two splits or seeds share one loader."""
        tag = f"{VARIANT_SEPARATOR}p{self.splits.index(split)}s{seed}"
        longest = max(len(VARIANT_SEPARATOR + p.name) for p in [*self.presets, Preset("full", 100)])
        room = LOADER_NAME_MAX - longest - len(tag)
        return self.dataset.name[: max(room, 1)] + tag


def plan(
    profile: Profile,
    presets: str,
    seeds: int,
    job: str | None = None,
    metric: str = "val_acc",
    splits: int = 1,
    higher_is_better: bool = True,
) -> ComparePlan:
    chosen = []
    for text in [p for p in presets.split(",") if p.strip()]:
        try:
            chosen.append(parse_preset(text))
        except PresetError as exc:
            raise CompareError(f"--presets: {exc}") from None
    if not chosen:
        raise CompareError("--presets: name at least one preset, e.g. full,random-25,el2n-25")
    if len({p.name for p in chosen}) != len(chosen):
        raise CompareError("--presets: a preset is named twice")
    for flag, count in (("--splits", splits), ("--seeds", seeds)):
        if not 1 <= count <= MAX_REPEATS:
            raise CompareError(
                f"{flag}: give 1 to {MAX_REPEATS} (3 or more to see the run-to-run spread)"
            )
    spec = _training_job(profile, job)
    config = profile.datasets.get(spec.dataset or "")
    if config is None or config.loader is None:
        raise CompareError(
            f"dataset {quoted(spec.dataset or '')} has no factory: the comparison serves it "
            "through a shared loader, so its [datasets] table needs one"
        )
    loader = config.loader
    targeted = any(p.method == "less" for p in chosen)
    if targeted and loader.selection_target is None:
        raise CompareError(
            f"less-P ranks samples by similarity to a target set: give "
            f'[datasets.{loader.name}] a selection_target = "MODULE:FACTORY"'
        )
    first = _first_split(loader, splits, targeted)
    return ComparePlan(
        profile,
        spec,
        loader,
        chosen,
        [first + k for k in range(splits)],
        list(range(seeds)),
        metric,
        higher_is_better,
    )


def _training_job(profile: Profile, job: str | None) -> JobSpec:
    readers = [spec for spec in profile.jobs if spec.dataset]
    if job is not None:
        readers = [spec for spec in readers if spec.name == job]
        if not readers:
            raise CompareError(f"--job: the profile has no job {quoted(job)} that reads a dataset")
    if not readers:
        raise CompareError(
            f"{profile.path}: no job reads a dataset; give the training job "
            'dataset = "NAME" and a [datasets.NAME] table with a factory'
        )
    if len(readers) > 1 and job is None:
        names = ", ".join(spec.name for spec in readers[:5])
        raise CompareError(
            f"{profile.path}: {len(readers)} jobs read a dataset ({names}); say "
            "which one to compare with --job NAME"
        )
    return readers[0]


def _first_split(loader: DatasetSpec, splits: int, targeted: bool) -> int:
    """The split_seed of split 0: the profile's (0 when its factory takes none)."""
    first = loader.args.get(SPLIT_ARG, 0)
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise CompareError(
            f"[datasets.{loader.name}] args: {SPLIT_ARG} must be a whole number >= 0, "
            f"found {quoted(first)}"
        )
    if splits > 1 and SPLIT_ARG not in loader.args:
        raise CompareError(
            f"--splits {splits}: add {SPLIT_ARG} = 0 to [datasets.{loader.name}] args (the "
            "factory argument that draws the train/val split; each split sets it)"
        )
    if splits > 1 and targeted and SPLIT_ARG not in loader.selection_target_args:
        raise CompareError(
            f"--splits {splits}: add {SPLIT_ARG} = 0 to [datasets.{loader.name}] "
            "selection_target_args too (the target set must come from the same split as the "
            "data it ranks)"
        )
    return first


@dataclass
class Trial:
    """One preset at one split and seed: its pre-pass and its training job."""

    preset: str
    split: int  # the split_seed it trained and evaluated on
    seed: int  # the seed offset (the dataset's seed + this; $GPUDESK_SEED)
    prepass_job: int | None = None
    prepass_key: str | None = None
    prepass_fresh: bool | None = None  # computed by this comparison (else reused)
    prepass_wall_s: float | None = None  # the fresh pre-pass job, wherever it ran
    prepass_compute_s: float | None = None  # of that, the selection itself (no start-up)
    prepass_cpu_s: float | None = None
    prepass_energy_j: float | None = None
    prepass_uses: int = 0  # training jobs that used the cached entry so far, all runs
    proxy_accuracy: float | None = None  # the entry's notes, for methods that train a proxy
    kept_per_class: dict[int, int] | None = None  # the kept set's class mix (labelled entries)
    dataset_per_class: dict[int, int] | None = None  # the whole training split's
    target_classes: list[int] | None = None  # the classes of the target set (less-P)
    reuse_s: float | None = None  # what taking the cached selection cost the training's loader
    train_job: int | None = None
    train_state: str | None = None
    train_wall_s: float | None = None
    train_cpu_s: float | None = None
    train_energy_j: float | None = None
    quality: float | None = None
    train_samples: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"split {self.split} seed {self.seed} {self.preset}"


class Comparison:
    def __init__(
        self,
        plan: ComparePlan,
        client: Client,
        cache: SelectionCache,
        say: Callable[[str], None],
        *,
        apply_station: bool = False,
    ) -> None:
        self.plan, self.client, self.cache, self.say = plan, client, cache, say
        self.apply_station = apply_station
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.group = f"compare-{plan.profile.name}@{stamp}"[:100]
        self.trials: list[Trial] = []
        self.current: int | None = None  # the job running now (cancelled on Ctrl-C)

    def run(self) -> list[Trial]:
        station = configure_station(
            self.client,
            self.plan.profile,
            apply=self.apply_station,
            how_to_apply="--apply-station applies it; gpudesk engine set keeps it",
        )
        for line in station.lines() if station is not None else []:
            self.say(line)
        register_datasets(
            self.client,
            [self.plan.dataset_for(k, s) for k in self.plan.splits for s in self.plan.seeds],
        )
        try:
            for split in self.plan.splits:
                for seed in self.plan.seeds:
                    for preset in self.plan.presets:
                        self.trials.append(self.trial(preset, split, seed))
        except KeyboardInterrupt:
            if self.current is not None:
                self.client.cancel([self.current])
            raise
        self._count_uses()
        return self.trials

    def _count_uses(self) -> None:
        """USES as the comparison ends: presets of one method and seed at other percents share
        an entry (random-10 and random-25), so each trial counts every training on it."""
        uses: dict[str, int | None] = {}
        for trial in self.trials:
            if not trial.prepass_key:
                continue
            if trial.prepass_key not in uses:
                cached = self.cache.load(trial.prepass_key)
                uses[trial.prepass_key] = None if cached is None else cached.training_uses
            counted = uses[trial.prepass_key]
            if counted is not None:
                trial.prepass_uses = counted

    def trial(self, preset: Preset, split: int, seed: int) -> Trial:
        trial = Trial(preset.name, split, seed)
        dataset = self.plan.dataset_for(split, seed)
        if preset.method not in NO_PREPASS:
            self.prepass(trial, preset, dataset)
            if trial.prepass_key is None:
                return trial  # it failed: the problem is recorded
        self.train(trial, preset, dataset)
        return trial

    # ----------------------------------------------------------------- pre-pass
    def prepass(self, trial: Trial, preset: Preset, dataset: DatasetSpec) -> None:
        job_id = self.submit(
            Prepass(dataset, preset.name).job(
                self.plan.job.workdir, f"prepass-{preset.name}-p{trial.split}s{trial.seed}"
            )
        )
        trial.prepass_job = job_id
        self.say(f"{trial.label}: pre-pass job {job_id}")
        output = record_prepass(self.cache, self.wait(job_id))
        if output is None:
            trial.problems.append(
                f"{trial.label}: pre-pass job {job_id} failed; see gpudesk logs {job_id}"
            )
            return
        trial.prepass_key = output["key"]
        trial.prepass_fresh = not output["reused"]

    # ----------------------------------------------------------------- training
    def train(self, trial: Trial, preset: Preset, dataset: DatasetSpec) -> None:
        spec = self.plan.job.to_dict()
        seed, split = str(trial.seed), str(trial.split)

        def fill(text: str) -> str:
            return text.replace("{seed}", seed).replace("{split}", split)

        spec["command"] = [fill(arg) for arg in spec["command"]]
        spec["env"] = {
            **{k: fill(v) for k, v in spec["env"].items()},
            ENV_SEED: seed,
            ENV_SPLIT: split,
        }
        spec.update(
            name=f"{self.plan.job.name}-{preset.name}-p{trial.split}s{trial.seed}"[:100],
            dataset=dataset.name,
            selection=preset.name,
        )
        made = JobSpec.from_dict(spec)
        # a refusal (a member's raised priority, more GPUs than the station has) is said at
        # the profile's table, not as the request's jobs[0]; the comparison stops there
        with said_at_their_tables([made], [self.plan.profile.origin_of(self.plan.job.name)]):
            job_id = self.submit(made)
        trial.train_job = job_id
        self.say(f"{trial.label}: training job {job_id}")
        done = self.wait(job_id)
        trial.train_state = done.state
        trial.train_wall_s = job_wall(done)
        if done.usage is not None:
            trial.train_cpu_s = done.usage.cpu_s
            trial.train_energy_j = done.usage.total_j
        # the end of its log across rotations, never the whole file (gpudesk.results)
        metrics = read_metrics(done.log) or {}
        if done.state != "succeeded":
            trial.problems.append(
                f"{trial.label}: training job {job_id} {done.state}; see gpudesk logs {job_id}"
            )
        elif self.plan.metric not in metrics:
            trial.problems.append(
                f"{trial.label}: training job {job_id} printed no `result {{json}}` line with "
                f"{quoted(self.plan.metric)}"
            )
        else:
            trial.quality = metrics[self.plan.metric]
            samples = metrics.get("train_samples")
            trial.train_samples = int(samples) if samples is not None else None
        self._read_selection(trial, done.loader)

    def _read_selection(self, trial: Trial, loader: str | None) -> None:
        for entry in self.client.status(fresh_loaders=True).loaders:
            chosen = entry.status.selection if entry.status is not None else None
            if entry.name == loader and chosen is not None:
                trial.reuse_s = chosen.select_s if chosen.reused else None
        if not trial.prepass_key:
            return
        cached = self.cache.load(trial.prepass_key)
        if cached is None:
            return
        trial.prepass_wall_s = cached.cost.job_wall_s
        trial.prepass_compute_s = cached.cost.wall_s
        trial.prepass_cpu_s = cached.cost.job_cpu_s
        trial.prepass_energy_j = cached.cost.energy_j
        accuracy = cached.notes.get("proxy_accuracy")
        if isinstance(accuracy, (int, float)) and not isinstance(accuracy, bool):
            trial.proxy_accuracy = float(accuracy)
        if cached.labels is not None:
            try:
                kept = kept_of(cached, trial.preset)
            except PresetError as exc:  # the entry is not this preset's: no class mix, said
                trial.problems.append(f"{trial.label}: the kept set's class mix: {exc}")
            else:
                trial.kept_per_class = class_counts(cached.labels, kept.canonical)
                trial.dataset_per_class = class_counts(cached.labels)
        # the classes the target set held, as the targeted pre-pass recorded them
        held = cached.notes.get("target_classes")
        if isinstance(held, list) and all(isinstance(c, int) for c in held):
            trial.target_classes = [int(c) for c in held]

    # ------------------------------------------------------------------ engine
    def submit(self, spec: JobSpec) -> int:
        (job_id,) = submit_specs(self.client, [spec], group=self.group)
        self.current = job_id
        return job_id

    def wait(self, job_id: int) -> JobView:
        (job,) = wait_for_jobs(self.client, [job_id], poll_s=POLL_S)
        self.current = None
        return job
