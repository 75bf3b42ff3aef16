"""What `gpudesk export slurm PROFILE DIR` writes: one sbatch script per submission of
`script.plan` (a job, or a sweep's array), each with a header saying where it came from and how
to submit it, and a `submit.sh` that submits them in dependency order (docs/slurm.md).

Everything here is text made from specs: nothing is written or run. The command
(gpudesk.cli.export) writes the files into a folder of their own and renames it into place.
A job's `after` (-k: the k-th job of the profile) becomes `--dependency=afterok:ID` on
`submit.sh`'s sbatch line for the script that holds job k, an array as a whole, since the ids
exist only once the parents are submitted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from gpudesk.core.cluster import ClusterSpec
from gpudesk.core.jobs import JobSpec
from gpudesk.core.local_selection import ENV_SELECTION
from gpudesk.slurm.request import GresOffer, SlurmMappingError
from gpudesk.slurm.script import Submission, literal, one_line, plan, render

SUBMIT_SCRIPT = "submit.sh"
LOGS = "logs"
MAX_NAME_CHARS = 60
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# The comment every exported script starts with: `--force` replaces only scripts that have it.
MARKER = "Written by gpudesk export slurm"


def safe_name(text: str) -> str:
    """A file-name part from a job's or sweep's name: letters, digits, `.`, `_` and `-`, every
    other run of characters one `_`, at most 60 characters, never hidden or empty."""
    name = _UNSAFE.sub("_", text).strip("._-")[:MAX_NAME_CHARS].rstrip("._-")
    return name or "job"


def output_pattern(directory: str, name: str, *, array: bool) -> str:
    """The --output file of a script: `DIR/logs/NAME-%j.out`, `-%A_%a.out` for an array (a `%`
    in DIR doubled, as sbatch reads `%%`)."""
    folder = literal(directory.rstrip("/"))
    suffix = "%A_%a" if array else "%j"
    return f"{folder}/{LOGS}/{name}-{suffix}.out"


@dataclass(frozen=True)
class ExportedScript:
    """One file of the export and what the summary says about it."""

    file: str  # "01-digits.sbatch"
    job_name: str  # its --job-name (an array's: the sweep's name)
    text: str
    jobs: int
    array: bool
    gres: str | None  # "gpu:a100:1"; None: a CPU job
    after: tuple[str, ...]  # the files of the scripts it runs after
    output: str  # its --output pattern

    def to_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "job_name": self.job_name,
            "jobs": self.jobs,
            "array": self.array,
            "gres": self.gres,
            "after": list(self.after),
            "output": self.output,
        }


@dataclass(frozen=True)
class Export:
    scripts: tuple[ExportedScript, ...]
    submit_script: str  # submit.sh's text


@dataclass(frozen=True)
class Origin:
    """Where the jobs came from and what the scripts were made with, for their headers."""

    profile: str  # the profile's path as the user named it
    version: str  # gpudesk's
    written: str  # when, ISO 8601
    offer_source: str  # how the offer was had: "sinfo -p gpu", "not asked (--no-ask)"


def _order(submissions: Sequence[Submission]) -> list[list[int]]:
    """Each submission's parents (indices into `submissions`), from its tasks' `after`."""
    # plan() keeps the jobs in order: the k-th task over all submissions is the k-th job
    by_job = [index for index, s in enumerate(submissions) for _ in s.tasks]
    parents: list[list[int]] = []
    for index, submission in enumerate(submissions):
        found: list[int] = []
        for task in submission.tasks:
            if task.spec.after_any or task.spec.after_notok:  # not dropped unsaid
                raise SlurmMappingError(
                    f"job {task.spec.name!r} runs after_any or after_notok, which only the "
                    "station's jobs take yet: an exported script waits with after (afterok)"
                )
            for ref in task.spec.after:
                if ref > 0 or -ref > len(by_job):
                    raise SlurmMappingError(
                        f"job {task.spec.name!r} runs after job {ref}, which is not a job of "
                        "this profile: an exported script can only wait for the profile's own "
                        "jobs"
                    )
                parent = by_job[-ref - 1]
                if parent == index:
                    raise SlurmMappingError(
                        f"job {task.spec.name!r} runs after a job of its own array"
                    )
                if parent not in found:
                    found.append(parent)
        parents.append(sorted(found))
    return parents


def _topological(parents: list[list[int]]) -> list[int]:
    """The submissions in plan order, except that each comes after its parents."""
    placed: list[int] = []
    done: set[int] = set()
    waiting = list(range(len(parents)))
    while waiting:
        ready = next((i for i in waiting if all(p in done for p in parents[i])), None)
        if ready is None:
            raise SlurmMappingError("the profile's jobs run after each other in a circle")
        placed.append(ready)
        done.add(ready)
        waiting.remove(ready)
    return placed


def _table(submission: Submission) -> str:
    first = submission.tasks[0].spec
    count = len(submission.tasks)
    if first.sweep is not None:
        jobs = f"{count} jobs" if submission.is_array else f"job {first.name!r}"
        return f'[[sweeps]] "{first.sweep}" ({jobs})'
    return f"[[jobs]] job {first.name!r}"


def _not_carried(submission: Submission) -> list[str]:
    """What the jobs ask of gpudesk that a Slurm script does not do."""
    specs = [t.spec for t in submission.tasks]
    notes: list[str] = []
    attempts = max(s.max_attempts for s in specs)
    if attempts > 1:
        notes.append(f"max_attempts = {attempts} (Slurm runs each job once; no retry)")
    datasets = sorted({s.dataset for s in specs if s.dataset})
    if datasets:
        notes.append(
            f"dataset = {', '.join(datasets)} (no shared loader producer on the cluster: "
            "SharedLoader(..., factory=...) reads it through a local DataLoader"
            + (
                ", its data selection alone (GPUDESK_SELECTION: the pre-pass script's cache entry)"
                if any(ENV_SELECTION in s.env for s in specs)
                else ", the whole of it, not its selection"
                if any(s.selection for s in specs)
                else ""
            )
            + ")"
        )
    if any(s.tracking for s in specs):
        notes.append("[tracking] (gpudesk makes no MLflow run for a job it did not submit)")
    hooks = sorted({s.notify for s in specs if s.notify})
    if hooks:
        shown = ", ".join(repr(h) for h in hooks[:2]) + (", …" if len(hooks) > 2 else "")
        notes.append(
            f"notify = {shown} (no command runs when a Slurm job ends: gpudesk's hook runs on "
            "the station; sbatch's --mail-type only sends mail)"
        )
    return notes


def _header(
    submission: Submission,
    file: str,
    position: int,
    total: int,
    origin: Origin,
    offer: GresOffer,
    parent_files: Sequence[str],
) -> list[str]:
    lines = [
        f"{MARKER} ({position} of {total}): {_table(submission)}",
        f"of the profile {origin.profile}; gpudesk {origin.version}, {origin.written}.",
        f"What the cluster offers: {offer.describe()} ({origin.offer_source}).",
    ]
    if parent_files:
        ids = ":".join(f"$ID_{f.split('-', 1)[0]}" for f in parent_files)
        lines += [
            f"Runs once {' and '.join(parent_files)} succeeded (an array: every task of it);",
            f"submit.sh adds --dependency=afterok:{ids} --kill-on-invalid-dep=yes.",
            "Submit: ./submit.sh (every script, in order); alone: sbatch "
            f"--dependency=afterok:ID --kill-on-invalid-dep=yes {file}",
        ]
    else:
        lines.append(f"Submit: ./submit.sh (every script, in order); alone: sbatch {file}")
    notes = _not_carried(submission)
    if notes:
        lines.append("Not carried to Slurm: " + "; ".join(notes) + ".")
    lines.append("Each #SBATCH line below says why it is there.")
    return lines


def _submit_script(scripts: Sequence[ExportedScript], origin: Origin) -> str:
    lines = [
        "#!/bin/bash",
        f"# {MARKER}: submits the {len(scripts)} sbatch script(s) of this folder, made from",
        f"# {one_line(origin.profile)} (gpudesk {origin.version}, {origin.written}), in dependency",
        "# order, and prints each one's Slurm job id. A script that runs after others gets",
        "# --dependency=afterok:<their ids> --kill-on-invalid-dep=yes: it starts once they have",
        "# all succeeded and is cancelled if one of them fails. If sbatch refuses a script, the",
        "# jobs already submitted are cancelled (scancel), so nothing is left half-submitted.",
        "set -u",
        'cd -- "$(dirname -- "$0")" || exit 1',
        'submitted=""',
        "",
        "submit() {  # submit SCRIPT [SBATCH OPTION...]: prints the job's id",
        "  local id",
        '  id=$(sbatch --parsable "${@:2}" "$1") || return 1',
        '  id=${id%%;*}  # "ID;CLUSTER" on a federation',
        "  case $id in",
        "    '' | *[!0-9]*)",
        "      echo \"submit.sh: sbatch answered '$id' for $1, not a job id\" >&2",
        "      return 1 ;;",
        "  esac",
        "  printf '%s\\n' \"$id\"",
        "}",
        "",
        "refused() {  # refused SCRIPT: cancel what was submitted, and stop",
        '  echo "submit.sh: sbatch refused $1; cancelling the jobs already submitted:'
        '${submitted:- none}" >&2',
        '  if [ -n "$submitted" ]; then scancel $submitted; fi',
        "  exit 1",
        "}",
        "",
    ]
    for script in scripts:
        var = f"ID_{script.file.split('-', 1)[0]}"
        args = [shlex.quote(script.file)]
        if script.after:
            ids = ":".join(f"${{ID_{f.split('-', 1)[0]}}}" for f in script.after)
            args += [f'--dependency="afterok:{ids}"', "--kill-on-invalid-dep=yes"]
        lines += [
            f"{var}=$(submit {' '.join(args)}) || refused {shlex.quote(script.file)}",
            f'submitted="$submitted ${var}"',
            f'echo "{script.file}: ${var}"',
        ]
    lines.append('echo "submitted:$submitted"')
    return "\n".join(lines) + "\n"


def export_scripts(
    specs: Sequence[JobSpec],
    cluster: ClusterSpec,
    offer: GresOffer,
    *,
    directory: str,
    origin: Origin,
) -> Export:
    """The scripts and submit.sh for these jobs, whose logs go to `directory`/logs (an absolute
    path: the jobs run in their own workdir). Raises SlurmMappingError for a job this cluster
    cannot be asked for."""
    submissions = plan(specs, cluster, offer)
    parents = _order(submissions)
    order = _topological(parents)
    width = max(2, len(str(len(order))))
    files: dict[int, str] = {}
    names: dict[int, str] = {}
    for position, index in enumerate(order, start=1):
        submission = submissions[index]
        names[index] = safe_name(submission.array_name or submission.tasks[0].spec.name)
        files[index] = f"{position:0{width}d}-{names[index]}.sbatch"
    scripts: list[ExportedScript] = []
    for position, index in enumerate(order, start=1):
        submission = submissions[index]
        file = files[index]
        parent_files = [files[p] for p in sorted(parents[index], key=order.index)]
        output = output_pattern(directory, names[index], array=submission.is_array)
        text = render(
            submission,
            output=output,
            header=_header(submission, file, position, len(order), origin, offer, parent_files),
        )
        gres = next((o.value for o in submission.options if o.flag == "--gres"), None)
        job_name = next(o.value for o in submission.options if o.flag == "--job-name")
        scripts.append(
            ExportedScript(
                file,
                job_name,
                text,
                len(submission.tasks),
                submission.is_array,
                gres,
                tuple(parent_files),
                output,
            )
        )
    return Export(tuple(scripts), _submit_script(scripts, origin))
