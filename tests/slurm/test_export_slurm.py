"""`gpudesk export slurm PROFILE DIR`: the scripts it writes, what it refuses, and the scripts
submitted by their own submit.sh on a real Slurm (tests/slurm_cluster.py), where the jobs must
run and print what they would on the station.

Most tests run the command in-process (the real error handling and exit codes) with --no-ask, or
with a `sinfo` on PATH that prints what the test cluster's real sinfo printed; submit.sh's shell
logic is also run against a stand-in sbatch that records its arguments, so it is checked where no
Slurm can be started."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Run
from slurm_cluster import SlurmCluster, missing_reason, running_cluster

from gpudesk import __version__
from gpudesk.examples import folder
from gpudesk.slurm.commands import parse_fields
from gpudesk.slurm.export import MARKER, safe_name
from gpudesk.slurm.request import SbatchOption, SlurmMappingError
from gpudesk.slurm.script import array_job_name, sbatch_word

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_export_slurm")

QUICKSTART = folder("profiles") / "quickstart.toml"
# What `sinfo -h -o %G` printed on the test cluster (tests/slurm_cluster.py's node).
SINFO_GRES = "gpu:a100:2,gpu:1g.10gb:2,mps:a100:100,mps:1g.10gb:0,shard:a100:4,shard:1g.10gb:0"

MIXED = """
name = "mixed"

[cluster]
partition = "gpu"
mem_gb = 1

[[jobs]]
name = "prep"
command = ["sh", "-c", "echo prep $STAGE"]
env = { STAGE = "one two" }

[[sweeps]]
name = "train"
command = ["sh", "-c", "echo train {x}"]
grid = { x = [1, 2] }
gpus = 1
after = ["prep"]

[[jobs]]
name = "big"
command = ["sh", "-c", "echo big"]
gpus = 2
time_limit = "90s"
priority = -5
after = ["train"]

[[jobs]]
name = "light"
command = ["echo", "light"]
gpus = 1
sm_pct = 50
max_attempts = 3
after = ["prep", "big"]

[[jobs]]
name = "small/mem"
command = ["echo", "small"]
gpus = 1
memory_gb = 8
"""


_C_SPACE = b" \t\n\v\f\r"  # isspace() in the C locale; sbatch reads bytes


def get_argument(line: bytes) -> tuple[bytes | None, int]:
    """A port of Slurm's get_argument (src/sbatch/opt.c): the next word of an #SBATCH line and
    how many bytes it took. A backslash makes the next byte literal, inside quotes too (a
    backslash-space is a space); `'` or `"` quote anywhere in a word; an unquoted `#` starts a
    comment. (The hetjob/packjob separators are left out: gpudesk writes none.)"""
    ptr = 0
    while ptr < len(line) and line[ptr] in _C_SPACE:
        ptr += 1
    if ptr == len(line):
        return None, ptr
    argument: bytearray | None = None
    q_char = 0
    escape_flag = quoted = False
    while ptr < len(line) and (quoted or line[ptr] not in _C_SPACE) and line[ptr] != 0x0A:
        byte = line[ptr]
        if escape_flag:
            escape_flag = False
        elif byte == 0x5C:  # backslash
            ptr += 1
            if ptr < len(line) and line[ptr] == 0x20:
                argument = (argument or bytearray()) + b" "
                ptr += 1
            else:
                escape_flag = True
            continue
        elif quoted:
            if byte == q_char:
                quoted = False
                ptr += 1
                continue
        elif byte in b"\"'":
            quoted, q_char = True, byte
            ptr += 1
            continue
        elif byte == 0x23:  # '#': the rest of the line is a comment
            break
        argument = (argument or bytearray()) + bytes([byte])
        ptr += 1
    assert not quoted, f"sbatch: Unmatched quote in {line!r}"
    return (bytes(argument) if argument is not None else None), ptr


def sbatch_argv(text: str) -> list[str]:
    """The options sbatch reads from a script, as its _opt_batch_script (src/sbatch/opt.c) does:
    each line starting `#SBATCH`, split by get_argument, until the first line that is neither a
    comment nor blank."""
    argv: list[str] = []
    for line in text.encode("utf-8", "surrogateescape").split(b"\n"):
        if line.startswith(b"#SBATCH"):
            rest = line[len(b"#SBATCH") :]
            while True:
                word, skipped = get_argument(rest)
                if word is None:
                    break
                argv.append(word.decode("utf-8", "surrogateescape"))
                rest = rest[skipped:]
        elif line.strip(_C_SPACE) and not line.strip(_C_SPACE).startswith(b"#"):
            break
    return argv


def sbatch_lines(text: str) -> dict[str, str]:
    """A script's #SBATCH options, flag -> value, as sbatch reads them (sbatch_argv)."""
    found = {}
    for option in sbatch_argv(text):
        flag, _, value = option.partition("=")
        found[flag] = value
    return found


def assert_every_option_explained(text: str) -> None:
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("#SBATCH "):
            assert lines[index + 1].startswith("#   "), f"{line!r} has no comment under it"


def write_profile(tmp_path: Path, text: str, name: str = "profile.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_quickstart_is_one_array_script(gpudesk: Run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = gpudesk("export", "slurm", str(QUICKSTART), str(out), "--no-ask")
    assert code == 0, stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "01-digits-lr_lr_-h_hidden.sbatch",
        "logs",
        "submit.sh",
    ]
    assert (out / "logs").is_dir() and not any((out / "logs").iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a temp folder left"
    script = (out / "01-digits-lr_lr_-h_hidden.sbatch").read_text()
    options = sbatch_lines(script)
    assert options["--array"] == "0-7"
    assert options["--job-name"] == "digits-lr-h"  # what squeue shows: no unfilled {lr}
    assert options["--output"] == f"{out}/logs/digits-lr_lr_-h_hidden-%A_%a.out"
    assert "--gres" not in options  # a CPU sweep
    assert_every_option_explained(script)
    assert script.count("exec python -m gpudesk.workloads.digits") == 8
    assert "  7)  # digits-lr0.1-h512" in script
    assert f"from {QUICKSTART}" not in script and str(QUICKSTART) in script
    assert f"gpudesk {__version__}" in script
    assert "What the cluster offers: not asked (--no-ask)." in script
    assert "alone: sbatch 01-digits-lr_lr_-h_hidden.sbatch" in script
    assert script.splitlines()[1].startswith(f"# {MARKER} (1 of 1): [[sweeps]]")
    submit = out / "submit.sh"
    assert submit.stat().st_mode & stat.S_IXUSR
    subprocess.run(["bash", "-n", str(submit)], check=True)
    assert "8 jobs, array 0-7" in stdout and "no gres (CPU)" in stdout
    assert f"submit: {submit}" in stdout


@pytest.mark.parametrize("columns", [40, 80])
def test_the_summary_fits_the_terminal_each_script_named_whole(
    gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    out = tmp_path / "out"
    code, stdout, stderr = gpudesk("export", "slurm", str(write_profile(tmp_path, MIXED)),
                                   str(out), "--no-ask")  # fmt: skip
    assert code == 0, stderr
    lines = stdout.splitlines()
    # only a path longer than the room runs past, beside its label at most
    assert all(len(line) <= columns or len(line.split()) <= 2 for line in lines), stdout
    scripts = sorted(p.name for p in out.glob("*.sbatch"))
    assert len(scripts) == 5 and {line.split()[0] for line in lines} >= set(scripts), stdout
    assert "--gres=gpu:1 after 01-prep.sbatch" in " ".join(stdout.split())  # 03-train's


def test_jobs_with_after_and_resources(gpudesk: Run, tmp_path: Path) -> None:
    profile = write_profile(tmp_path, MIXED)
    out = tmp_path / "scripts"
    code, stdout, stderr = gpudesk(
        "export", "slurm", str(profile), str(out), "--no-ask", "--json", "--account", "lab"
    )
    assert code == 0, stderr
    summary = json.loads(stdout)
    files = [s["file"] for s in summary["scripts"]]
    assert files == [
        "01-prep.sbatch",
        "02-small_mem.sbatch",
        "03-train.sbatch",
        "04-big.sbatch",
        "05-light.sbatch",
    ]
    by_file = {s["file"]: s for s in summary["scripts"]}
    assert by_file["03-train.sbatch"]["jobs"] == 2 and by_file["03-train.sbatch"]["array"]
    assert by_file["03-train.sbatch"]["after"] == ["01-prep.sbatch"]
    assert by_file["05-light.sbatch"]["after"] == ["01-prep.sbatch", "04-big.sbatch"]
    assert by_file["02-small_mem.sbatch"]["after"] == []
    assert [s["gres"] for s in summary["scripts"]] == [None, "gpu:1", "gpu:1", "gpu:2", "gpu:1"]
    assert summary["cluster"]["partition"] == "gpu" and summary["cluster"]["account"] == "lab"
    assert summary["offer_known"] is False and summary["warnings"] == []

    texts = {f: (out / f).read_text() for f in files}
    for text in texts.values():
        assert_every_option_explained(text)
        options = sbatch_lines(text)
        assert options["--partition"] == "gpu" and options["--account"] == "lab"
        assert options["--mem"] == "1024M"
        assert options["--chdir"] == str(tmp_path)
        assert options["--open-mode"] == "append" and options["--export"] == "ALL"
        assert "--dependency" not in options  # ids exist only at submit: submit.sh passes them
    assert "export STAGE='one two'" in texts["01-prep.sbatch"]
    assert sbatch_lines(texts["01-prep.sbatch"])["--output"] == f"{out}/logs/prep-%j.out"
    assert sbatch_lines(texts["03-train.sbatch"])["--output"] == f"{out}/logs/train-%A_%a.out"
    big = sbatch_lines(texts["04-big.sbatch"])
    assert big["--time"] == "00:01:30" and big["--nice"] == "5"
    assert "max_attempts = 3 (Slurm runs each job once; no retry)" in texts["05-light.sbatch"]
    assert "--dependency=afterok:$ID_01:$ID_04" in texts["05-light.sbatch"]

    submit = (out / "submit.sh").read_text()
    assert "ID_01=$(submit 01-prep.sbatch) || refused 01-prep.sbatch" in submit
    assert (
        'ID_03=$(submit 03-train.sbatch --dependency="afterok:${ID_01}" '
        "--kill-on-invalid-dep=yes)" in submit
    )
    assert '--dependency="afterok:${ID_01}:${ID_04}" --kill-on-invalid-dep=yes' in submit
    assert "ID_02=$(submit 02-small_mem.sbatch) ||" in submit


def fake_slurm(tmp_path: Path, *, refuse_call: int | None = None) -> dict[str, str]:
    """A PATH with an sbatch that answers ids 101, 102, … and records its arguments (the
    `refuse_call`-th call fails as sbatch does), and an scancel that records its own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    refuse = (
        f'if [ "$n" -eq {refuse_call} ]; then\n'
        '  echo "sbatch: error: Batch job submission failed: Invalid account" >&2; exit 1\nfi\n'
        if refuse_call
        else ""
    )
    (bin_dir / "sbatch").write_text(
        "#!/bin/bash\n"
        f"n=$(( $(cat {calls}/count 2>/dev/null || echo 0) + 1 )); echo $n > {calls}/count\n"
        + refuse
        + f'echo "sbatch $*" >> {calls}/log\n'
        'echo "$((100 + n))"\n'
    )
    (bin_dir / "scancel").write_text(f'#!/bin/bash\necho "scancel $*" >> {calls}/log\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    calls.mkdir()
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_submit_sh_submits_in_order_with_dependencies(gpudesk: Run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert (
        gpudesk("export", "slurm", str(write_profile(tmp_path, MIXED)), str(out), "--no-ask")[0]
        == 0
    )
    env = fake_slurm(tmp_path)
    done = subprocess.run(
        ["/bin/sh", "-c", f"cd / && {out}/submit.sh"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "01-prep.sbatch: 101",
        "02-small_mem.sbatch: 102",
        "03-train.sbatch: 103",
        "04-big.sbatch: 104",
        "05-light.sbatch: 105",
        "submitted: 101 102 103 104 105",
    ]
    assert (tmp_path / "calls" / "log").read_text().splitlines() == [
        "sbatch --parsable 01-prep.sbatch",
        "sbatch --parsable 02-small_mem.sbatch",
        "sbatch --parsable --dependency=afterok:101 --kill-on-invalid-dep=yes 03-train.sbatch",
        "sbatch --parsable --dependency=afterok:103 --kill-on-invalid-dep=yes 04-big.sbatch",
        "sbatch --parsable --dependency=afterok:101:104 --kill-on-invalid-dep=yes 05-light.sbatch",
    ]


def test_submit_sh_cancels_what_it_submitted_when_sbatch_refuses(
    gpudesk: Run, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert (
        gpudesk("export", "slurm", str(write_profile(tmp_path, MIXED)), str(out), "--no-ask")[0]
        == 0
    )
    env = fake_slurm(tmp_path, refuse_call=3)
    done = subprocess.run([str(out / "submit.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 1
    assert "Invalid account" in done.stderr
    assert "sbatch refused 03-train.sbatch; cancelling the jobs already submitted: 101 102" in (
        done.stderr
    )
    log = (tmp_path / "calls" / "log").read_text().splitlines()
    assert log[-1] == "scancel 101 102" and len(log) == 3


def fake_sinfo(tmp_path: Path, *, fails: bool = False) -> tuple[str, str]:
    """PATH and SLURM_CONF for an sinfo that prints what the test cluster's printed."""
    bin_dir = tmp_path / "sinfo-bin"
    bin_dir.mkdir()
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=fake\n")
    body = (
        'echo "sinfo: error: Unable to contact slurm controller (connect failure)" >&2; exit 1'
        if fails
        else f'case "$*" in *%R*) echo gpu ;; *) echo {SINFO_GRES} ;; esac'
    )
    (bin_dir / "sinfo").write_text(f"#!/bin/bash\n{body}\n")
    (bin_dir / "sinfo").chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}", str(conf)


def test_the_cluster_is_asked_what_it_offers(
    gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, conf = fake_sinfo(tmp_path)
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("SLURM_CONF", conf)
    out = tmp_path / "out"
    code, stdout, stderr = gpudesk("export", "slurm", str(write_profile(tmp_path, MIXED)), str(out))
    assert code == 0, stderr
    assert "what the cluster offers: gpu:a100, gpu:1g.10gb (MIG), mps, shard (sinfo -p gpu)" in (
        stdout
    )
    gres = {line.split()[0]: line for line in stdout.splitlines() if ".sbatch" in line}
    assert "--gres=gpu:1g.10gb:1" in gres["02-small_mem.sbatch"]  # memory_gb = 8: a MIG slice
    assert "--gres=mps:50" in gres["05-light.sbatch"]  # sm_pct = 50: an MPS share
    light = (out / "05-light.sbatch").read_text()
    assert "# What the cluster offers: gpu:a100, gpu:1g.10gb (MIG), mps, shard (sinfo -p gpu)." in (
        light
    )

    code, _, stderr = gpudesk(
        "export",
        "slurm",
        str(tmp_path / "profile.toml"),
        str(tmp_path / "o2"),
        "--partition",
        "cpu",
    )
    assert code == 2
    assert "has no partition 'cpu'; it has 'gpu'" in stderr and "Nothing was written" in stderr
    assert not (tmp_path / "o2").exists()


def test_a_cluster_that_cannot_be_asked(
    gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, conf = fake_sinfo(tmp_path, fails=True)
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("SLURM_CONF", conf)
    profile = write_profile(tmp_path, MIXED)
    code, _, stderr = gpudesk("export", "slurm", str(profile), str(tmp_path / "a"))
    assert code == 0
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "Unable to contact slurm controller" in warnings[0]
    assert "not asked (sinfo failed)" in (tmp_path / "a" / "05-light.sbatch").read_text()
    # asked for explicitly, it is an error, and nothing is written
    code, _, stderr = gpudesk("export", "slurm", str(profile), str(tmp_path / "b"), "--ask")
    assert code == 1 and "Unable to contact slurm controller" in stderr
    assert not (tmp_path / "b").exists()


def test_bad_inputs_write_nothing(gpudesk: Run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    bad = write_profile(tmp_path, "[[jobs]]\nname = 'x'\ncommand = ['true']\ngpus = 'two'\n")
    code, _, stderr = gpudesk("export", "slurm", str(bad), str(out), "--no-ask")
    assert code == 2 and "the profile is not valid" in stderr and "jobs[0].gpus" in stderr
    assert not out.exists()

    good = write_profile(tmp_path, MIXED, "good.toml")
    code, _, stderr = gpudesk("export", "slurm", str(good), str(out), "--share", "half")
    assert code == 2 and "--share: expected one of auto, whole, mig, mps, timeslice" in stderr
    assert not out.exists()

    # a mapping the jobs cannot meet: an MPS share for jobs that name no sm_pct
    code, _, stderr = gpudesk("export", "slurm", str(good), str(out), "--no-ask", "--share", "mps")
    assert code == 2
    assert "cannot be asked of this cluster" in stderr and "names none" in stderr
    assert "Nothing was written" in stderr
    assert not out.exists()

    # a profile's after_any is the station's: never dropped unsaid from the scripts
    other = MIXED.replace('after = ["prep"]', 'after_any = ["prep"]')
    code, _, stderr = gpudesk(
        "export", "slurm", str(write_profile(tmp_path, other)), str(out), "--no-ask"
    )
    assert code == 2 and "runs after_any or after_notok, which only the" in stderr, stderr
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.toml", "profile.toml"]

    code, _, stderr = gpudesk("export", "slurm", str(good), str(out), "--no-ask", "--share", "mig")
    assert code == 2 and "the cluster was not asked what it offers" in stderr
    assert not out.exists()

    # a file, a link
    (tmp_path / "file").write_text("x")
    code, _, stderr = gpudesk("export", "slurm", str(good), str(tmp_path / "file"), "--no-ask")
    assert code == 2 and "is not a folder" in stderr
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    code, _, stderr = gpudesk(
        "export", "slurm", str(good), str(tmp_path / "link"), "--no-ask", "--force"
    )
    assert code == 2 and "is a symbolic link" in stderr
    assert not any((tmp_path / "real").iterdir())


def test_a_folder_that_is_not_empty_needs_force(gpudesk: Run, tmp_path: Path) -> None:
    good = write_profile(tmp_path, MIXED)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, stderr = gpudesk("export", "slurm", str(good), str(out), "--no-ask")
    assert code == 2
    assert "exists and is not empty" in stderr and "--force" in stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]

    # an empty folder is fine, and so is writing again with --force: an earlier export's
    # scripts go, everything else stays
    (out / "notes.txt").unlink()
    assert gpudesk("export", "slurm", str(QUICKSTART), str(out), "--no-ask")[0] == 0
    (out / "notes.txt").write_text("mine")
    (out / "99-mine.sbatch").write_text("#!/bin/bash\necho mine\n")
    code, _, stderr = gpudesk("export", "slurm", str(good), str(out), "--no-ask", "--force")
    assert code == 0, stderr
    names = sorted(p.name for p in out.iterdir())
    assert "01-digits-lr_lr_-h_hidden.sbatch" not in names
    assert {"notes.txt", "99-mine.sbatch", "01-prep.sbatch", "05-light.sbatch", "submit.sh"} <= (
        set(names)
    )
    assert "05-light.sbatch" in (out / "submit.sh").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_options_override_the_profiles_cluster(gpudesk: Run, tmp_path: Path) -> None:
    profile = write_profile(tmp_path, MIXED)
    out = tmp_path / "out"
    code, stdout, stderr = gpudesk(
        "export", "slurm", str(profile), str(out), "--no-ask", "--json",
        "--partition", "big", "--qos", "low", "--mig-profile", "3g.20gb", "--gpu-type", "h100",
    )  # fmt: skip
    assert code == 0, stderr
    scripts = json.loads(stdout)["scripts"]
    assert [s["gres"] for s in scripts] == [
        None,
        "gpu:3g.20gb:1",
        "gpu:3g.20gb:1",
        "gpu:h100:2",
        "gpu:3g.20gb:1",
    ]
    options = sbatch_lines((out / "04-big.sbatch").read_text())
    assert options["--partition"] == "big" and options["--qos"] == "low"
    assert options["--mem"] == "1024M"  # the profile's, not overridden


PREEMPTIBLE = """
[[jobs]]
name = "v"
command = ["true"]
max_attempts = 3
preemptible = true
preempt_signal = "USR2"
preempt_grace_s = 300
notify = "echo done"

[[jobs]]
name = "plain"
command = ["true"]
preemptible = true
preempt_grace_s = 1.5

[[jobs]]
name = "not-preemptible"
command = ["true"]
"""


def test_preemptible_jobs_are_requeued_and_signalled(gpudesk: Run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    profile = write_profile(tmp_path, PREEMPTIBLE)
    code, _, stderr = gpudesk("export", "slurm", str(profile), str(out), "--no-ask")
    assert code == 0, stderr
    v = (out / "01-v.sbatch").read_text()
    argv = sbatch_argv(v)
    assert "--requeue" in argv and "--signal=B:USR2@300" in argv
    assert_every_option_explained(v)
    assert "export GPUDESK_PREEMPT_SIGNAL=SIGUSR2 GPUDESK_PREEMPT_GRACE_S=300" in v
    # nothing dropped unsaid: what Slurm does not do is in the header
    header = next(line for line in v.splitlines() if line.startswith("# Not carried to Slurm:"))
    assert "max_attempts = 3" in header and "notify = 'echo done'" in header
    assert "preempt" not in header
    # gpudesk's own defaults (SIGUSR1, 120 s) where the job names none; a grace in whole seconds
    plain = sbatch_argv((out / "02-plain.sbatch").read_text())
    assert "--requeue" in plain and "--signal=B:USR1@2" in plain  # 1.5 s, rounded up
    other = (out / "03-not-preemptible.sbatch").read_text()
    assert "--requeue" not in sbatch_argv(other) and "GPUDESK_PREEMPT" not in other
    assert "Not carried" not in other


def test_the_default_preempt_signal_and_grace(gpudesk: Run, tmp_path: Path) -> None:
    profile = write_profile(tmp_path, "[[jobs]]\nname='d'\ncommand=['true']\npreemptible=true\n")
    out = tmp_path / "out"
    assert gpudesk("export", "slurm", str(profile), str(out), "--no-ask")[0] == 0
    text = (out / "01-d.sbatch").read_text()
    assert "--signal=B:USR1@120" in sbatch_argv(text) and "(gpudesk's defaults)" in text
    assert "GPUDESK_PREEMPT_SIGNAL=SIGUSR1 GPUDESK_PREEMPT_GRACE_S=120" in text


# The job: catches SIGUSR2 in its own process, says so, and leaves as a preempted job does.
# The handler writes with os.write: the signal may land while `print('ready')` is still inside
# stdout's buffer (the test has read the line already), and a print there is a reentrant call
# (RuntimeError), which killed the job with a traceback instead of exit 75.
CATCHER = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGUSR2, lambda *_: (os.write(1, ('caught ' + os.environ"
    "['GPUDESK_PREEMPT_SIGNAL'] + '\\n').encode()), os._exit(75)))\n"
    "print('ready', os.getpid(), flush=True)\n"
    "signal.pause()\n"
)


def test_the_jobs_own_process_gets_the_preempt_signal(gpudesk: Run, tmp_path: Path) -> None:
    """`--signal=B:` makes slurmstepd kill(2) the batch shell's pid alone: the script execs the
    job, so that pid is the job's own process, which catches the signal and leaves."""
    profile = write_profile(
        tmp_path,
        "[[jobs]]\nname = 'catcher'\npreemptible = true\npreempt_signal = 'USR2'\n"
        f"command = [{json.dumps(sys.executable)}, '-c', {json.dumps(CATCHER)}]\n",
    )
    out = tmp_path / "out"
    assert gpudesk("export", "slurm", str(profile), str(out), "--no-ask")[0] == 0
    script = out / "01-catcher.sbatch"
    assert "--signal=B:USR2@120" in sbatch_argv(script.read_text())
    batch = subprocess.Popen(
        ["/bin/bash", str(script)], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    assert batch.stdout is not None
    word, pid = batch.stdout.readline().split()
    assert word == "ready" and int(pid) == batch.pid  # the batch shell is the job (exec)
    batch.send_signal(signal.SIGUSR2)  # what slurmstepd does: kill(batch shell's pid, sig)
    assert batch.stdout.read() == "caught SIGUSR2\n"
    assert batch.wait(timeout=30) == 75


# Words an #SBATCH line must give back exactly: spaces, both quotes, backslashes (a trailing
# one, one before a space, a quote or another), `$`, `#`, a tab, non-ASCII.
AWKWARD = [
    "plain",
    "two words",
    "it's",
    'say "hi"',
    "back\\slash",
    "trailing\\",
    "\\ lead",
    "\\\\double",
    '\\"',
    "$HOME and ${X} and $(id)",
    "hash # not a comment",
    "tab\there",
    "naïve-日本語",
    "'single' \"double\" \\ mixed $ #",
    "",
]


@pytest.mark.parametrize("value", AWKWARD)
def test_sbatch_words_read_back_exactly(value: str) -> None:
    for flag in ("--job-name", "--chdir", "--comment"):
        line = f"#SBATCH {sbatch_word(SbatchOption(flag, value, ''))}"
        assert sbatch_argv(f"#!/bin/bash\n{line}\n") == [f"{flag}={value}" if value else flag]


def test_sbatch_words_that_cannot_be_written() -> None:
    for value in ("a\nb", "a\x00b"):
        with pytest.raises(SlurmMappingError, match="#SBATCH line"):
            sbatch_word(SbatchOption("--job-name", value, ""))
    with pytest.raises(SlurmMappingError, match="backslash in --output"):
        sbatch_word(SbatchOption("--output", "/tmp/a\\b/x-%j.out", ""))


def test_awkward_names_and_folders_reach_sbatch_exactly(gpudesk: Run, tmp_path: Path) -> None:
    folder = tmp_path / "we\\ird $x 'q' \"d\" #é"
    folder.mkdir()
    jobs = "".join(
        f"[[jobs]]\nname = {json.dumps(name)}\ncommand = ['true']\n"
        f"workdir = {json.dumps(str(folder))}\n\n"
        for name in ("back\\slash", "sp ace 'q' \"d\" $HOME #x", "naïve")
    )
    out = tmp_path / "out"
    code, _, stderr = gpudesk("export", "slurm", str(write_profile(tmp_path, jobs)), str(out))
    assert code == 0, stderr
    names = []
    for file in sorted(out.glob("*.sbatch")):
        text = file.read_text()
        options = sbatch_lines(text)
        assert options["--chdir"] == str(folder)
        names.append(options["--job-name"])
        subprocess.run(["bash", "-n", str(file)], check=True)
    assert names == ["back\\slash", "sp ace 'q' \"d\" $HOME #x", "naïve"]


def test_what_an_sbatch_line_cannot_hold_is_refused(gpudesk: Run, tmp_path: Path) -> None:
    # a backslash in the export folder: --output would lose its %j (the command says so first)
    profile = write_profile(tmp_path, "[[jobs]]\nname = 'x'\ncommand = ['true']\n")
    out = tmp_path / "a\\b"
    code, _, stderr = gpudesk("export", "slurm", str(profile), str(out), "--no-ask")
    assert code == 2 and "a backslash, which sbatch's --output patterns" in stderr, stderr
    assert not out.exists()
    # a newline in the job's folder: an #SBATCH line ends at it
    (tmp_path / "new\nline").mkdir()
    bad = write_profile(
        tmp_path, "[[jobs]]\nname = 'x'\ncommand = ['true']\nworkdir = \"new\\nline\"\n", "b.toml"
    )
    code, _, stderr = gpudesk("export", "slurm", str(bad), str(tmp_path / "c"), "--no-ask")
    assert code == 2 and "holds a newline" in stderr, stderr
    assert not (tmp_path / "c").exists()


def test_array_job_names() -> None:
    assert array_job_name("digits-lr{lr}-h{hidden}") == "digits-lr-h"
    assert array_job_name("sw{lr}-{x}") == "sw"
    assert array_job_name("{x}") == "sweep"
    assert array_job_name("run ${HOME} {x}") == "run ${HOME}"  # ${...} is the shell's


def test_safe_names() -> None:
    assert safe_name("digits-lr{lr}-h{hidden}") == "digits-lr_lr_-h_hidden"
    assert safe_name("a b/c") == "a_b_c"
    assert safe_name("../..") == "job"
    assert safe_name("train[x=1]#2") == "train_x_1_2"
    assert len(safe_name("x" * 300)) == 60


# --------------------------------------------------------------------- a real Slurm

REAL = """
name = "on-slurm"

[cluster]
partition = "gpu"
mem_gb = 0.25

[[sweeps]]
name = "task"
command = ["sh", "-c", "echo task {x}"]
grid = { x = [1, 2] }

[[jobs]]
name = "after-sweep"
command = ["sh", "-c", "echo after the sweep"]
after = ["task"]

[[jobs]]
name = "whole"
command = ["sh", "-c", "echo whole CVD=$CUDA_VISIBLE_DEVICES"]
gpus = 1

[[jobs]]
name = "mps"
command = ["sh", "-c", "echo mps PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]
gpus = 1
sm_pct = 50

[[jobs]]
name = "mig"
command = ["sh", "-c", "echo mig CVD=$CUDA_VISIBLE_DEVICES"]
gpus = 1
memory_gb = 8
"""
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    with running_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def states(cluster: SlurmCluster, job_id: str) -> list[str]:
    """JobState of a job, or of each task of an array."""
    text = cluster.run("scontrol", "show", "job", "-o", job_id)
    return [parse_fields(line)["JobState"] for line in text.splitlines() if line.strip()]


def submitted_and_completed(
    slurm: SlurmCluster, out: Path, within: float
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The export's submit.sh run: each script's Slurm job id, and the JobState of each (of each
    task of an array), every one COMPLETED within `within` seconds."""
    done = subprocess.run(
        [str(out / "submit.sh")], env=slurm.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    ids = dict(line.split(": ") for line in done.stdout.splitlines()[:-1])
    deadline = time.monotonic() + within
    while True:
        found = {file: states(slurm, job_id) for file, job_id in ids.items()}
        if all(s and set(s) <= ENDED for s in found.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert all(set(s) == {"COMPLETED"} for s in found.values()), (found, slurm.logs())
    return ids, found


def test_exported_scripts_run_on_a_real_slurm(
    slurm: SlurmCluster, gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    out = tmp_path / "out"
    code, stdout, stderr = gpudesk("export", "slurm", str(write_profile(tmp_path, REAL)), str(out))
    assert code == 0, stderr
    assert "(sinfo -p gpu)" in stdout
    gres = {s.split()[0]: s for s in stdout.splitlines() if ".sbatch" in s}
    assert re.search(r"--gres=gpu:1$", gres["01-whole.sbatch"])
    assert "--gres=mps:50" in gres["02-mps.sbatch"]
    assert "--gres=gpu:1g.10gb:1" in gres["03-mig.sbatch"]

    ids, found = submitted_and_completed(slurm, out, within=30)
    assert list(ids) == [
        "01-whole.sbatch",
        "02-mps.sbatch",
        "03-mig.sbatch",
        "04-task.sbatch",
        "05-after-sweep.sbatch",
    ]  # [[jobs]] first, in file order, but a job after a sweep comes after it
    assert len(found["04-task.sbatch"]) == 2  # the array's two tasks

    def log(name: str) -> str:
        return (out / "logs" / name).read_text()

    sweep = ids["04-task.sbatch"]
    assert log(f"task-{sweep}_0.out") == "task 1\n"
    assert log(f"task-{sweep}_1.out") == "task 2\n"
    assert log(f"after-sweep-{ids['05-after-sweep.sbatch']}.out") == "after the sweep\n"
    assert re.fullmatch(r"whole CVD=\d+\n", log(f"whole-{ids['01-whole.sbatch']}.out"))
    assert log(f"mps-{ids['02-mps.sbatch']}.out") == "mps PCT=50\n"
    assert re.fullmatch(r"mig CVD=\d+\n", log(f"mig-{ids['03-mig.sbatch']}.out"))
    # the job after the sweep started only once both of its tasks had ended
    after = parse_fields(slurm.run("scontrol", "show", "job", "-o", ids["05-after-sweep.sbatch"]))
    assert after["Dependency"] == "(null)"  # met, and cleared
    task_ends = [
        parse_fields(line)["EndTime"]
        for line in slurm.run("scontrol", "show", "job", "-o", sweep).splitlines()
    ]
    assert after["StartTime"] >= max(task_ends)


SELECTED = """
name = "sel"
[cluster]
partition = "gpu"

[datasets.syn]
factory = "gpudesk.workloads.synthetic:make_dataset"
args = {{ size = 120, shape = [4] }}
seed = 3
batch_size = 8
selection = "random-25"

[[jobs]]
name = "train"
dataset = "syn"
command = [{python}, "-c", {script}]
"""
READ_AN_EPOCH = (
    "import json; from gpudesk.loader import SharedLoader; "
    "loader = SharedLoader('syn', 8, seed=3, with_ids=True, "
    "factory='gpudesk.workloads.synthetic:make_dataset', factory_kwargs={'size': 120, "
    "'shape': [4]}); print(json.dumps(sorted(i for _, ids in loader for i in ids.tolist())))"
)


def test_an_exported_profile_with_a_selection_runs_its_prepass_first_and_reads_it(
    slurm: SlurmCluster, gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile whose job trains on a data selection, exported: its pre-pass is a script of
    its own, submitted first; the job's script runs after it and is told its selection
    (GPUDESK_SELECTION), which its loader's fallback reads from the pre-pass's cache entry."""
    from gpudesk.paths import Home
    from gpudesk.selection.apply import select
    from gpudesk.selection.cache import SelectionCache
    from gpudesk.workloads.synthetic import make_dataset

    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    text = SELECTED.format(python=json.dumps(sys.executable), script=json.dumps(READ_AN_EPOCH))
    out = tmp_path / "out"
    code, stdout, stderr = gpudesk("export", "slurm", str(write_profile(tmp_path, text)), str(out))
    assert code == 0, stderr
    assert "02-train.sbatch" in stdout and "after 01-prepass-syn-random-25.sbatch" in stdout
    script = (out / "02-train.sbatch").read_text()
    assert "its data selection alone (GPUDESK_SELECTION" in " ".join(script.split()), script
    assert "export GPUDESK_SELECTION=" in script, script
    ids, _ = submitted_and_completed(slurm, out, within=60)
    assert list(ids) == ["01-prepass-syn-random-25.sbatch", "02-train.sbatch"]
    log = (out / "logs" / f"train-{ids['02-train.sbatch']}.out").read_text()
    assert (
        "reading its data selection random-25 locally, 30 of 120 samples (from the selection cache)"
    ) in log, log
    cache = SelectionCache(Home.from_env(None).selection_dir)
    kept = select(make_dataset(120, (4,)), "random-25", cache, seed=3).indices
    assert kept is not None and json.loads(log.splitlines()[-1]) == kept.tolist()


def test_a_folder_in_gpudesks_home_is_refused(
    gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--force` into gpudesk's home (named, below it, or through a link that points there)
    would put scripts among the engine's database and logs, and replace any of its files an
    earlier export's names match: refused, nothing written, as `--plot FILE` is."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "keep").write_text("the engine's")
    monkeypatch.setenv("GPUDESK_HOME", str(home))
    (tmp_path / "into").symlink_to(home)
    for out in (home, home / "scripts", tmp_path / "into", tmp_path / "into" / "sub"):
        code, _, stderr = gpudesk(
            "export", "slurm", str(QUICKSTART), str(out), "--no-ask", "--force"
        )
        assert code == 2, stderr
        assert f"is inside gpudesk's home {home}" in stderr, stderr
    assert sorted(p.name for p in home.iterdir()) == ["keep"]


def test_a_dir_that_can_never_be_a_folder_is_refused_and_nothing_written(
    gpudesk: Run, tmp_path: Path
) -> None:
    """DIR under a link loop, a file or a link to nothing was exit 1, "cannot make a folder in
    …: File exists"; a byte that is not UTF-8 in DIR was a UnicodeEncodeError traceback once
    the scripts, which name their folder, were written."""
    good = write_profile(tmp_path, MIXED)
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "file").write_text("x")
    (tmp_path / "gone").symlink_to("nowhere")
    for into, said in (
        ("loop/out", "leads through a symbolic link that points back to itself (a loop)"),
        ("file/out", "lies under a file, not a folder"),
        ("gone/out", "/gone, a symbolic link to nowhere, which does not exist"),
        (os.fsdecode(b"out\xff"), "out\\xff' holds bytes that are not UTF-8"),
        ("x" * 300, "cannot be used: File name too long"),  # was an OSError traceback
    ):
        code, _, stderr = gpudesk("export", "slurm", str(good), str(tmp_path / into), "--no-ask")
        assert code == 2 and said in stderr, (into, stderr)
        assert "Traceback" not in stderr and stderr.count("\n") == 1, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "gone", "loop", "profile.toml"]


def test_a_profiles_path_is_spelled_out_in_the_scripts_comments(
    gpudesk: Run, tmp_path: Path
) -> None:
    """The profile's path is named in a comment of submit.sh and of each script: a newline in
    it started a shell line of its own in submit.sh (`./submit.sh` ran what followed it), and
    a byte that is not UTF-8 was a UnicodeEncodeError traceback."""
    for i, name in enumerate(("p\necho INJECTED\n.toml", os.fsdecode(b"p\xff.toml"))):
        profile = write_profile(tmp_path, MIXED, name)
        out = tmp_path / f"out{i}"
        code, _, stderr = gpudesk("export", "slurm", str(profile), str(out), "--no-ask")
        assert code == 0, stderr
        spelled = name.replace("\n", "\\x0a").replace("\udcff", "\\xff")
        for script in (out / "submit.sh", *out.glob("*.sbatch")):
            text = script.read_text()
            assert spelled in text, text
            assert not any(line.startswith("echo INJECTED") for line in text.splitlines())
            subprocess.run(["bash", "-n", str(script)], check=True)
