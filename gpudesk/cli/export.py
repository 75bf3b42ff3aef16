"""`gpudesk export slurm PROFILE DIR`: a profile's jobs as sbatch scripts to read, edit and submit
by hand, and a `submit.sh` that submits them in dependency order (docs/slurm.md).

The scripts are made (gpudesk.slurm.export) before anything is written; they are written
into a folder beside DIR and renamed into place at the end, so a refusal or a failure leaves
nothing half-written.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpudesk.cli.common import cluster_with_options, fail, print_json
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.cli.report_file import (
    folder_path_problem,
    gpudesk_homes,
    home_holding,
    too_long_problem,
)
from gpudesk.cli.std_streams import already_done
from gpudesk.text import is_text, printable_line, quoted

if TYPE_CHECKING:
    from gpudesk.core.cluster import ClusterSpec
    from gpudesk.core.jobs import JobSpec
    from gpudesk.profile import Profile
    from gpudesk.slurm.export import Export
    from gpudesk.slurm.request import GresOffer

export_app = typer.Typer(
    help="Write a profile's jobs out for another scheduler, to read, edit and submit by hand.",
    no_args_is_help=True,
)

_OLD_SCRIPT = re.compile(r"^\d+-.*\.sbatch$")
_BAD_PATH = re.compile(r"[\x00-\x1f\x7f\\]")


def _check_dir(target: Path, force: bool) -> Path:
    """DIR as an absolute path, refused (exit 2) when it cannot or should not be written."""
    absolute = Path(os.path.abspath(target))
    if _BAD_PATH.search(str(absolute)):
        fail(
            f"'{printable_line(str(absolute))}' holds a control character or a backslash, which "
            "sbatch's --output patterns and the scripts' comments cannot carry; name another "
            "folder",
            EXIT_USAGE,
        )
    home = home_holding(target, gpudesk_homes())
    if home is not None:
        fail(
            f"{target} is inside gpudesk's home {home}, which holds the engine's database, logs "
            "and sockets; name a folder elsewhere for the scripts",
            EXIT_USAGE,
        )
    too_long = too_long_problem(target)  # is_symlink() raised it as a traceback
    if too_long is not None:
        fail(f"{too_long}; name a shorter folder for the scripts", EXIT_USAGE)
    if target.is_symlink():
        fail(
            f"{target} is a symbolic link; gpudesk writes the scripts into a real folder only, "
            "so that they land where the link's owner meant them to. Name the folder it points "
            "to, or a new one.",
            EXIT_USAGE,
        )
    if not is_text(str(absolute)):  # the scripts are UTF-8 text, and name their folder
        fail(
            f"'{printable_line(str(absolute))}' holds bytes that are not UTF-8, which the "
            "scripts (UTF-8 text that names their folder) cannot carry; name another folder",
            EXIT_USAGE,
        )
    if target.exists() and not target.is_dir():
        fail(f"{target} exists and is not a folder; name a new folder for the scripts", EXIT_USAGE)
    problem = folder_path_problem(target)  # a link loop or a file on its way: never a folder
    if problem is not None:
        fail(f"{target} {problem}; name a new folder for the scripts", EXIT_USAGE)
    if target.is_dir():
        try:
            entries = list(target.iterdir())
        except OSError as exc:
            fail(f"cannot read the folder {target}: {exc.strerror or exc}", EXIT_FAILED)
        if entries and not force:
            fail(
                f"{target} exists and is not empty ({len(entries)} entries), and gpudesk does not "
                "write scripts among files it did not make. Name a new or empty folder, or pass "
                "--force to write into it (replacing submit.sh and the scripts of an earlier "
                "export, keeping everything else).",
                EXIT_USAGE,
            )
        logs = target / "logs"
        if logs.is_symlink() or (logs.exists() and not logs.is_dir()):
            fail(f"{logs} exists and is not a folder; the jobs' logs go there", EXIT_USAGE)
    return absolute


def _offer(cluster: ClusterSpec, ask: bool | None) -> tuple[GresOffer, str, str | None]:
    """What the cluster offers, how that was learned, and a warning when asking failed."""
    from gpudesk.slurm.commands import SlurmCommands, SlurmError
    from gpudesk.slurm.request import GresOffer

    if ask is False:
        return GresOffer(), "--no-ask", None
    if ask is None and shutil.which("sinfo") is None:
        return GresOffer(), "sinfo is not on PATH", None
    commands = SlurmCommands.of_process(cluster.conf)
    try:
        offer = commands.offer(cluster.partition)
        if cluster.partition is not None:
            known = commands.partitions()
            if cluster.partition not in known:
                fail(
                    f"the cluster ({commands.conf}) has no partition "
                    f"{quoted(cluster.partition)}; it "
                    f"has {', '.join(repr(p) for p in known) or 'none'} (sinfo -s lists them). "
                    "Set [cluster] partition or --partition to one of them, or leave it out for "
                    "the cluster's default. Nothing was written.",
                    EXIT_USAGE,
                )
    except SlurmError as exc:
        if ask:
            fail(f"{exc} Nothing was written (--no-ask writes the scripts without asking).")
        return (
            GresOffer(),
            "sinfo failed",
            f"could not ask the cluster what its nodes offer, so the scripts assume nothing "
            f"about it (a one-GPU job asks for a whole GPU unless [cluster] share says "
            f"otherwise): {exc}",
        )
    where = f"sinfo -p {cluster.partition}" if cluster.partition else "sinfo, every partition"
    return offer, where, None


def _write(export: Export, absolute: Path) -> None:
    """Write the files into a new folder beside DIR, then move them into place."""
    from gpudesk.slurm.export import LOGS, MARKER, SUBMIT_SCRIPT

    parent = absolute.parent
    temporary = parent / f".{absolute.name}.export-{secrets.token_hex(4)}"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        temporary.mkdir()
    except OSError as exc:
        fail(f"cannot make a folder in {parent}: {exc.strerror or exc}", EXIT_FAILED)
    try:
        for script in export.scripts:
            (temporary / script.file).write_text(script.text)
        submit = temporary / SUBMIT_SCRIPT
        submit.write_text(export.submit_script)
        mode = submit.stat().st_mode
        submit.chmod(mode | ((mode & 0o444) >> 2))  # executable by whoever may read it
        (temporary / LOGS).mkdir()
        if not absolute.is_dir() or not any(absolute.iterdir()):
            os.replace(temporary, absolute)  # rename(2) replaces an empty folder
            return
        # --force into a folder with other files: drop the earlier export's, move ours in
        for old in absolute.iterdir():
            if (old.name == SUBMIT_SCRIPT or _OLD_SCRIPT.match(old.name)) and _ours(old, MARKER):
                old.unlink()
        for new in sorted(temporary.iterdir()):
            if new.name == LOGS:
                (absolute / LOGS).mkdir(exist_ok=True)
            else:
                os.replace(new, absolute / new.name)
        shutil.rmtree(temporary)
    except OSError as exc:
        shutil.rmtree(temporary, ignore_errors=True)
        fail(f"cannot write the scripts into {absolute}: {exc.strerror or exc}", EXIT_FAILED)


def _ours(path: Path, marker: str) -> bool:
    """Did an earlier `gpudesk export slurm` write this file (a regular one, not a link)?"""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open(errors="replace") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return marker in head


def _summary(export: Export, absolute: Path, offer: str, room: int | None = None) -> str:
    """What was written, in `room` columns (a terminal's; None: a pipe's one line each)."""
    from gpudesk import render
    from gpudesk.slurm.export import LOGS, SUBMIT_SCRIPT

    count = len(export.scripts)
    shown = printable_line(str(absolute))  # the user's folder, spelled out (\u202e, \x1b)
    lines = [
        render.fold(
            f"wrote {count} sbatch script{'s' * (count != 1)} and {SUBMIT_SCRIPT} to {shown} "
            f"(what the cluster offers: {offer}):",
            room,
        )
    ]
    width = max(len(s.file) for s in export.scripts)
    for script in export.scripts:
        jobs = f"{script.jobs} job{'s' * (script.jobs != 1)}"
        if script.array:
            jobs += f", array 0-{script.jobs - 1}"
        gres = f"--gres={script.gres}" if script.gres else "no gres (CPU)"
        after = f"  after {', '.join(script.after)}" if script.after else ""
        line = f"  {script.file:<{width}}  {jobs:<17}  {gres}{after}"
        if room is not None and render.cell_width(line) > room:  # what it asks for under it
            line = f"  {script.file}\n" + render.fill(f"    {jobs}, {gres}{after}", room, "    ")
        lines.append(line)
    lines.append(f"logs: {shown}/{LOGS}/")
    lines.append(f"submit: {shown}/{SUBMIT_SCRIPT}")
    return "\n".join(lines)


_PROFILE = typer.Argument(..., help="A profile.toml with [[jobs]] and [[sweeps]].")
_DIRECTORY = typer.Argument(
    ..., metavar="DIR", help="The folder to write into (made if missing; must be empty)."
)
_PARTITION = typer.Option(None, "--partition", metavar="PARTITION", help="[cluster] partition.")
_ACCOUNT = typer.Option(None, "--account", metavar="ACCOUNT", help="[cluster] account.")
_QOS = typer.Option(None, "--qos", metavar="QOS", help="[cluster] qos.")
_SHARE = typer.Option(
    None,
    "--share",
    metavar="SHARE",
    help="[cluster] share: how a one-GPU job asks for its GPU (auto, whole, mig, mps, timeslice).",
)
_GPU_TYPE = typer.Option(
    None, "--gpu-type", metavar="TYPE", help="[cluster] gpu_type: whole GPUs of this gres type."
)
_MIG_PROFILE = typer.Option(
    None,
    "--mig-profile",
    metavar="PROFILE",
    help="[cluster] mig_profile: the MIG slice a one-GPU job asks for.",
)
_ASK = typer.Option(
    None,
    "--ask/--no-ask",
    help="Ask the cluster (sinfo) which GPU gres its nodes offer. Default: ask when sinfo "
    "is on PATH, and go on without if that fails.",
)
_FORCE = typer.Option(
    False,
    "--force",
    help="Write into a folder that is not empty (replacing an earlier export's scripts).",
)
_JSON = typer.Option(False, "--json", help="Print the summary as JSON.")


@export_app.command("slurm")
def slurm(
    profile: str = _PROFILE,  # not a Path: Path("") would be the current folder
    directory: Path = _DIRECTORY,
    partition: str | None = _PARTITION,
    account: str | None = _ACCOUNT,
    qos: str | None = _QOS,
    share: str | None = _SHARE,
    gpu_type: str | None = _GPU_TYPE,
    mig_profile: str | None = _MIG_PROFILE,
    ask: bool | None = _ASK,
    force: bool = _FORCE,
    json_out: bool = _JSON,
) -> None:
    """Write a profile's jobs as sbatch scripts: one per job, or per sweep as a job array, each
    #SBATCH line with a comment saying why, and a submit.sh that submits them in dependency
    order.

    The profile's [cluster] table says where they go; the options override it. The jobs' output
    goes to DIR/logs. Nothing is submitted: read, edit, then run DIR/submit.sh."""
    from gpudesk.profile import ProfileError, load_profile

    try:
        loaded = load_profile(profile)
    except ProfileError as exc:
        fail(f"the profile is not valid:\n{exc}", EXIT_USAGE)
    cluster = cluster_with_options(
        loaded.cluster,
        {
            "partition": partition,
            "account": account,
            "qos": qos,
            "share": share,
            "gpu_type": gpu_type,
            "mig_profile": mig_profile,
        },
    )
    absolute = _check_dir(directory, force)
    offer, offer_source, warning = _offer(cluster, ask)
    if warning is not None:
        print(f"warning: {warning}", file=sys.stderr)
    export = _export(loaded, cluster, offer, offer_source, absolute)
    _write(export, absolute)
    shown = printable_line(str(absolute))
    already_done(
        f"the scripts were written into {shown} all the same: {shown}/submit.sh submits them"
    )
    described = f"{offer.describe()} ({offer_source})"
    if json_out:
        _print_json(export, absolute, loaded, cluster, offer, described, warning)
    else:
        from gpudesk import render

        print(_summary(export, absolute, described, render.table_width()))


def _export(
    loaded: Profile, cluster: ClusterSpec, offer: GresOffer, offer_source: str, absolute: Path
) -> Export:
    """The profile's jobs as scripts for the cluster; a job the cluster cannot be asked for
    as it is, is a usage error (and nothing is written)."""
    from gpudesk import __version__
    from gpudesk.slurm.export import Origin, export_scripts
    from gpudesk.slurm.request import SlurmMappingError

    origin = Origin(
        # spelled out: the scripts are UTF-8 text, and a newline in a comment of submit.sh
        # would start a shell line of its own
        profile=printable_line(str(loaded.path)),
        version=__version__,
        written=datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
        offer_source=offer_source,
    )
    try:
        export = export_scripts(
            _with_prepasses(loaded, cluster), cluster, offer, directory=str(absolute), origin=origin
        )
    except SlurmMappingError as exc:
        fail(
            f"the profile's jobs cannot be asked of this cluster as they are: {exc}. Nothing "
            "was written.",
            EXIT_USAGE,
        )
    return export


def _with_prepasses(loaded: Profile, cluster: ClusterSpec) -> list[JobSpec]:
    """The profile's jobs as `gpudesk run --on slurm` sends them: each selection's pre-pass
    job first, and the jobs that train on a selection after it, told which
    (gpudesk.api.submit.on_cluster: their loaders' fallback reads it, not the whole dataset)."""
    from gpudesk.api.prepass import prepass_workdir, prepasses_first, profile_prepasses
    from gpudesk.api.submit import on_cluster

    profile = replace(loaded, jobs=on_cluster(loaded, cluster))
    prepasses = profile_prepasses(profile)
    if not prepasses:
        return profile.jobs
    workdir = prepass_workdir(profile)
    return prepasses_first(profile, prepasses, [p.job(workdir) for p in prepasses])


def _print_json(
    export: Export,
    absolute: Path,
    loaded: Profile,
    cluster: ClusterSpec,
    offer: GresOffer,
    described: str,
    warning: str | None,
) -> None:
    from gpudesk.slurm.export import LOGS, SUBMIT_SCRIPT

    print_json(
        {
            "directory": str(absolute),
            "profile": str(loaded.path),
            "cluster": cluster.to_dict(),
            "offer": described,
            "offer_known": offer.known,
            "warnings": [warning] if warning else [],
            "scripts": [s.to_dict() for s in export.scripts],
            "logs": str(absolute / LOGS),
            "submit": str(absolute / SUBMIT_SCRIPT),
        }
    )
