"""Tests for `gpudesk.profile`: parsing, expansion and the precision of every error."""

from __future__ import annotations

import os
import pickle
import textwrap
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpudesk.named_file as named_file
from gpudesk.core.datasets import DatasetSpec
from gpudesk.core.station import StationConfig
from gpudesk.profile import (
    MAX_JOBS,
    MAX_PROFILE_BYTES,
    DatasetConfig,
    Problem,
    Profile,
    ProfileError,
    ReportConfig,
    load_profile,
    parse_profile,
)

PATH = "profiles/test.toml"
JOB = '[[jobs]]\nname = "a"\ncommand = ["true"]\n'


def source(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def parse(text: str, path: str | os.PathLike[str] = PATH) -> Profile:
    return parse_profile(source(text).encode(), path)


def problems(text: str | bytes) -> list[Problem]:
    data = text if isinstance(text, bytes) else source(text).encode()
    with pytest.raises(ProfileError) as info:
        parse_profile(data, PATH)
    return info.value.problems


def only_problem(text: str | bytes) -> Problem:
    found = problems(text)
    assert len(found) == 1, "\n".join(map(str, found))
    return found[0]


def line_of(text: str, fragment: str, occurrence: int = 1) -> int:
    """1-based line of the `occurrence`-th line containing `fragment`."""
    hits = [n for n, line in enumerate(source(text).splitlines(), 1) if fragment in line]
    return hits[occurrence - 1]


# --- valid profiles ----------------------------------------------------------------------------

FULL = """
name = "quickstart"
description = "everything at once"

[station]
backend = "none"
policy = "fifo"
slots = 3

[defaults]
workdir = "runs"
env = { OMP_NUM_THREADS = "1", SEED = "0" }
gpus = 1
memory_gb = 4
sm_pct = 50
priority = 5
max_attempts = 2
dataset = "digits"

[datasets.digits]
factory = "gpudesk.workloads.digits:dataset"
args = { size = 100, shape = [3, 8] }
batch_size = 16
workers = 1
seed = 7

[datasets.plain]

[[jobs]]
name = "train"
command = ["python", "train.py"]
env = { SEED = "1", EXTRA = "x" }
workdir = "sub/../jobdir"
dataset = "plain"
gpus = 0
memory_gb = 8.5
sm_pct = 40
priority = -3
max_attempts = 1

[[jobs]]
name = "inherit"
command = "echo $HOME"
shell = true

[[jobs]]
name = "absolute"
command = ["ls"]
workdir = "/tmp"
"""


def test_full_profile_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "quick.toml"
    path.write_text(source(FULL))
    profile = load_profile(path)

    assert profile.path == path.absolute()
    assert profile.name == "quickstart"
    assert profile.description == "everything at once"
    assert profile.station == StationConfig(backend="none", policy="fifo", slots=3)
    assert profile.datasets == {
        "digits": DatasetConfig(
            "digits",
            "gpudesk.workloads.digits:dataset",
            DatasetSpec(
                "digits",
                "gpudesk.workloads.digits:dataset",
                {"size": 100, "shape": [3, 8]},
                batch_size=16,
                workers=1,
                seed=7,
            ),
        ),
        "plain": DatasetConfig("plain", None),
    }
    train, inherit, absolute = profile.jobs

    assert train.name == "train"
    assert train.command == ("python", "train.py")
    assert train.shell is False
    assert train.workdir == str(tmp_path / "jobdir")
    assert train.env == {"OMP_NUM_THREADS": "1", "SEED": "1", "EXTRA": "x"}  # job wins
    assert (train.gpus, train.memory_gb, train.sm_pct) == (0, 8.5, 40.0)
    assert (train.dataset, train.priority, train.max_attempts) == ("plain", -3, 1)
    assert train.group is None

    assert inherit.command == ("echo $HOME",)
    assert inherit.shell is True
    assert inherit.workdir == str(tmp_path / "runs")
    assert inherit.env == {"OMP_NUM_THREADS": "1", "SEED": "0"}
    assert (inherit.gpus, inherit.memory_gb, inherit.sm_pct) == (1, 4.0, 50.0)
    assert (inherit.dataset, inherit.priority, inherit.max_attempts) == ("digits", 5, 2)

    assert absolute.workdir == "/tmp"


def test_minimal_profile_defaults(tmp_path: Path) -> None:
    profile = parse(JOB, tmp_path / "my-profile.toml")
    assert profile.name == "my-profile"
    assert profile.description is None
    assert profile.station == StationConfig()
    assert profile.datasets == {}
    [job] = profile.jobs
    assert job.workdir == str(tmp_path)  # no workdir anywhere: the profile's directory
    assert (job.gpus, job.memory_gb, job.sm_pct, job.dataset) == (0, None, None, None)
    assert dict(job.env) == {}


def test_relative_path_becomes_absolute() -> None:
    profile = parse(JOB, "profiles/x.toml")
    assert profile.path == Path.cwd() / "profiles" / "x.toml"
    assert profile.jobs[0].workdir == str(Path.cwd() / "profiles")


def test_defaults_shell_applies_to_jobs() -> None:
    profile = parse("""
        [defaults]
        shell = true
        [[jobs]]
        name = "a"
        command = "echo hi | tr a-z A-Z"
    """)
    assert profile.jobs[0].command == ("echo hi | tr a-z A-Z",)
    assert profile.jobs[0].shell is True


def test_byte_order_mark_is_tolerated() -> None:
    profile = parse_profile(b"\xef\xbb\xbf" + JOB.encode(), PATH)
    assert [job.name for job in profile.jobs] == ["a"]


def test_inline_array_of_jobs() -> None:
    profile = parse("""
        jobs = [
            { name = "a", command = ["x"] },
            { name = "b", command = ["y"], gpus = 2 },
        ]
    """)
    assert [(job.name, job.gpus) for job in profile.jobs] == [("a", 0), ("b", 2)]


def test_inline_array_of_jobs_error_lines() -> None:
    text = source("""
        jobs = [
            { name = "a", command = ["x"] },
            { name = "b", command = ["y"], gpu = 2 },
            { name = "c" },
        ]
    """)
    found = problems(text)
    assert [(p.key, p.line) for p in found] == [("jobs[1].gpu", 3), ("jobs[2].command", 4)]


def test_crlf_line_endings() -> None:
    text = 'name = "x"\r\n\r\n[[jobs]]\r\nname = "a"\r\ncommand = ["x"]\r\ngpus = "1"\r\n'
    problem = only_problem(text.encode())
    assert (problem.key, problem.line) == ("jobs[0].gpus", 6)


def test_job_repeat_names_and_repeat_placeholder() -> None:
    profile = parse("""
        [[jobs]]
        name = "train"
        command = ["python", "t.py", "--seed={repeat}", "{other}", "${repeat}"]
        env = { SEED = "{repeat}", RAW = "{x}" }
        workdir = "run-{repeat}"
        repeat = 3
    """)
    assert [job.name for job in profile.jobs] == ["train#1", "train#2", "train#3"]
    second = profile.jobs[1]
    # only {repeat} is substituted in [[jobs]]; other braces and ${...} stay as written
    assert second.command == ("python", "t.py", "--seed=2", "{other}", "${repeat}")
    assert second.env == {"SEED": "2", "RAW": "{x}"}
    assert second.workdir.endswith(os.sep + "run-2")


def test_job_name_template_with_repeat() -> None:
    profile = parse("""
        [[jobs]]
        name = "seed-{repeat}"
        command = ["x"]
        repeat = 2
    """)
    assert [job.name for job in profile.jobs] == ["seed-1", "seed-2"]


def test_sweep_expansion_order_names_and_substitution() -> None:
    profile = parse("""
        [defaults]
        env = { BASE = "{lr}" }

        [[jobs]]
        name = "first"
        command = ["x"]

        [[sweeps]]
        name = "lr"
        command = ["python", "-m", "m", "--lr", "{lr}", "--hidden={hidden}"]
        env = { HIDDEN = "{hidden}" }
        workdir = "out/{lr}"
        grid = { lr = [0.1, 1e-5], hidden = [32, 64] }
    """)
    names = [job.name for job in profile.jobs]
    assert names == [
        "first",
        "lr[lr=0.1,hidden=32]",
        "lr[lr=0.1,hidden=64]",
        "lr[lr=1e-05,hidden=32]",
        "lr[lr=1e-05,hidden=64]",
    ]
    job = profile.jobs[3]
    assert job.command == ("python", "-m", "m", "--lr", "1e-05", "--hidden=32")
    assert job.env == {"BASE": "{lr}", "HIDDEN": "32"}  # [defaults] values are verbatim
    assert job.workdir.endswith(os.path.join("profiles", "out", "1e-05"))


def test_sweep_with_subtable_grid_shell_and_repeat() -> None:
    profile = parse("""
        [[sweeps]]
        name = "run-{mode}-{repeat}"
        command = "echo ${HOME} {mode} $USER {flag}"
        shell = true
        repeat = 2

        [sweeps.grid]
        mode = ["fast", "slow"]
        flag = [true]
    """)
    assert [job.name for job in profile.jobs] == [
        "run-fast-1",
        "run-fast-2",
        "run-slow-1",
        "run-slow-2",
    ]
    assert profile.jobs[2].command == ("echo ${HOME} slow $USER true",)


def test_sweep_repeat_suffix_without_template() -> None:
    profile = parse("""
        [[sweeps]]
        name = "s"
        command = ["x", "{n}", "{repeat}"]
        grid = { n = [1, 2] }
        repeat = 2
    """)
    assert [job.name for job in profile.jobs] == ["s[n=1]#1", "s[n=1]#2", "s[n=2]#1", "s[n=2]#2"]
    assert profile.jobs[1].command == ("x", "1", "2")


def test_comments_and_multiline_strings_do_not_confuse_lines() -> None:
    text = '''
        description = """
        [[jobs]]
        gpus = "not real"
        """
        # [[jobs]] in a comment
        [[jobs]]
        name = 'a'
        command = ["x"]

        [[jobs]]
        name = "b"
        command = ["y"]
        gpus = "two"
    '''
    problem = only_problem(text)
    assert problem.key == "jobs[1].gpus"
    assert problem.line == line_of(text, 'gpus = "two"')


# --- error precision ---------------------------------------------------------------------------


def test_problem_and_error_rendering() -> None:
    problem = Problem("profiles/x.toml", 12, "jobs[1].gpus", "expected a number")
    assert str(problem) == "profiles/x.toml:12: jobs[1].gpus: expected a number"
    assert str(Problem("x.toml", None, "", "no such file")) == "x.toml: no such file"
    assert str(Problem("x.toml", 3, "", "bad")) == "x.toml:3: bad"

    many = [Problem("x.toml", n, f"k{n}", "m") for n in range(1, 26)]
    error = ProfileError(many)
    lines = str(error).splitlines()
    assert len(lines) == 21
    assert lines[-1] == "… and 5 more"
    assert pickle.loads(pickle.dumps(error)).problems == many


def test_wrong_field_value_message_shape() -> None:
    text = JOB + 'gpus = "two"\n'
    problem = only_problem(text)
    assert str(problem) == (
        f"{PATH}:4: jobs[0].gpus: expected a whole number from 0 to 64, found 'two' (string)"
    )


def test_bad_toml() -> None:
    text = '[[jobs]]\nname = "a"\ngpus = \n'
    problem = only_problem(text)
    assert (problem.line, problem.key) == (3, "")
    assert problem.message == "invalid TOML (column 8): Invalid value"


def test_bad_toml_duplicate_table() -> None:
    problem = only_problem('[[jobs]]\nname = "a"\n[jobs]\n')
    assert problem.line == 3
    assert "Cannot declare ('jobs',) twice" in problem.message


def test_report_names_the_metric_and_its_goal() -> None:
    assert parse(JOB).report is None  # without [report] no job is called best
    text = '[report]\nmetric = "final_loss"\ngoal = "min"\n' + JOB
    assert parse(text).report == ReportConfig("final_loss", "min")


@pytest.mark.parametrize(
    ("text", "key", "line", "fragment"),
    [
        ("report = 3\n" + JOB, "report", 1, "expected a [report] table, found 3 (integer)"),
        ('[report]\ngoal = "max"\n' + JOB, "report.metric", 1, 'e.g. metric = "val_acc"'),
        (
            '[report]\nmetric = "val_acc"\n' + JOB,
            "report.goal",
            1,
            'say goal = "max" if a larger val_acc is better, or goal = "min"',
        ),
        (
            '[report]\nmetric = "val_acc"\ngoal = "maximum"\n' + JOB,
            "report.goal",
            3,
            'expected "max" (larger is better) or "min" (smaller is better), found \'maximum\'',
        ),
        ('[report]\nmetric = 1\ngoal = "max"\n' + JOB, "report.metric", 2, "found 1 (integer)"),
        ('[report]\nmetric = ""\ngoal = "max"\n' + JOB, "report.metric", 2, 'such as "val_acc"'),
        (
            '[report]\nmetric = "a"\ngoal = "max"\nmetirc = "b"\n' + JOB,
            "report.metirc",
            4,
            "unknown key; did you mean 'metric'?",
        ),
    ],
)
def test_bad_report_tables(text: str, key: str, line: int, fragment: str) -> None:
    problem = only_problem(text)
    assert (problem.key, problem.line) == (key, line)
    assert fragment in problem.message


@pytest.mark.parametrize(
    ("text", "key", "line", "fragment"),
    [
        ('jobs = "x"', "jobs", 1, "expected an array of tables ([[jobs]]), found 'x' (string)"),
        ('[jobs]\nname = "a"', "jobs", 1, "write [[jobs]] with double brackets"),
        ("sweeps = 3", "sweeps", 1, "expected an array of tables ([[sweeps]]), found 3"),
        ("jobs = [1]", "jobs[0]", 1, "expected a table of job settings, found 1 (integer)"),
        ("station = [1]\n" + JOB, "station", 1, "expected a [station] table, found [1] (array)"),
        (JOB + "[[station]]", "station", 4, "expected a [station] table, found an array of tables"),
        ("defaults = 3\n" + JOB, "defaults", 1, "expected a [defaults] table, found 3 (integer)"),
        ("datasets = 1\n" + JOB, "datasets", 1, "expected a table of datasets"),
        (JOB + '[datasets]\ndigits = "x"', "datasets.digits", 5, "expected a [datasets.digits]"),
        ("name = 3\n" + JOB, "name", 1, "expected a string, found 3 (integer)"),
        ("description = [1]\n" + JOB, "description", 1, "expected a string, found [1] (array)"),
        (JOB + "gpus = 65", "jobs[0].gpus", 4, "expected a whole number from 0 to 64, found 65"),
        (JOB + "memory_gb = 0", "jobs[0].memory_gb", 4, "expected a number above 0 to 16384"),
        (JOB + "sm_pct = true", "jobs[0].sm_pct", 4, "found true (boolean)"),
        (JOB + 'priority = "high"', "jobs[0].priority", 4, "expected a whole number from -1000"),
        (JOB + "max_attempts = 0", "jobs[0].max_attempts", 4, "from 1 to 100, found 0"),
        (JOB + "repeat = 1001", "jobs[0].repeat", 4, "expected a whole number from 1 to 1000"),
        (JOB + 'shell = "yes"', "jobs[0].shell", 4, "expected true or false, found 'yes'"),
        (JOB + 'env = { "1X" = "a" }', "jobs[0].env", 4, "'1X' is not a valid environment"),
        (JOB + "env = { A = [1] }", "jobs[0].env", 4, "A should be a string, found [1] (array)"),
        (JOB + 'workdir = ""', "jobs[0].workdir", 4, "expected a directory path, found ''"),
        (JOB + 'dataset = "a b"', "jobs[0].dataset", 4, "expected a dataset name"),
        (JOB + "[station]\nslots = 0", "station.slots", 5, "from 1 to 4096, found 0 (integer)"),
        (
            JOB + '[station]\nbackend = "cuda"',
            "station.backend",
            5,
            "expected one of auto, nvml, none, sim:dgx-station-a100",
        ),
        (
            JOB + '[station]\nbackend = "sim:dgx-station-a100"\nmig = { 7 = "3g.20gb" }',
            "station.mig",
            6,
            "GPU 7: the station sim:dgx-station-a100 has GPUs 0..3",
        ),
        (
            JOB + '[station]\nmig = { 0 = "3g.40gb" }\nbackend = "sim:a100-40gb"',
            "station.mig",
            5,
            "GPU 0: a NVIDIA A100-SXM4-40GB has no MIG profile 3g.40gb; it offers 1g.5gb,",
        ),
        (JOB + "[defaults]\ngpus = -1", "defaults.gpus", 5, "found -1"),
        (
            JOB + '[datasets.d]\nfactory = "nope"',
            "datasets.d.factory",
            5,
            "expected \"package.module:callable\", found 'nope' (string)",
        ),
        (JOB + '[datasets."a b"]', 'datasets."a b"', 4, "expected a dataset name"),
        (
            JOB + '[datasets.d]\nfactory = "a:b"\nbatch_size = 0',
            "datasets.d.batch_size",
            6,
            "expected a whole number from 1 to 1048576, found 0",
        ),
        (JOB + '[datasets.d]\nfactory = "a:b"\nargs = 3', "datasets.d.args", 6, "expected a table"),
        (
            JOB + '[datasets.d]\nfactory = "a:b"\nselection = "el2n"',
            "datasets.d.selection",
            6,
            "say how much to keep, e.g. el2n-25",
        ),
        (
            JOB + '[datasets.d]\nfactory = "a:b"\nselection = "less-25"',
            "datasets.d.selection",
            6,
            "name one with selection_target",
        ),
        (
            JOB + 'dataset = "d"\nselection = "magic-25"\n[datasets.d]\nfactory = "a:b"',
            "jobs[0].selection",
            5,
            "unknown selection method 'magic'",
        ),
        (
            JOB + 'selection = "random-25"',
            "jobs[0].selection",
            4,
            "a selection applies to the job's dataset",
        ),
        (JOB + "gpus = 0x7fffffffffffffffff", "jobs[0].gpus", 4, "integer out of range"),
        (JOB + "env = { A = 0x7fffffffffffffffff }", "jobs[0].env.A", 4, "integer out of range"),
    ],
)
def test_wrong_types_and_values(text: str, key: str, line: int, fragment: str) -> None:
    problem = only_problem(text)
    assert (problem.key, problem.line) == (key, line)
    assert fragment in problem.message


@pytest.mark.parametrize(
    ("text", "key", "line", "fragment"),
    [
        ('nmae = "x"\n' + JOB, "nmae", 1, "unknown key; did you mean 'name'?"),
        (JOB + '[station]\nbackedn = "auto"', "station.backedn", 5, "did you mean 'backend'?"),
        (JOB + "[defaults]\ngpu = 1", "defaults.gpu", 5, "did you mean 'gpus'?"),
        (
            JOB + '[datasets.digits]\nfactroy = "a:b"',
            "datasets.digits.factroy",
            5,
            "did you mean 'factory'?",
        ),
        (
            JOB + '[datasets.d]\nfactory = "a:b"\nbatchsize = 8',
            "datasets.d.batchsize",
            6,
            "did you mean 'batch_size'?",
        ),
        (JOB + "gpu = 1", "jobs[0].gpu", 4, "unknown key; did you mean 'gpus'?"),
        (
            '[[sweeps]]\nname = "s"\ncommand = ["{x}"]\ngrid = { x = [1] }\npriorty = 1',
            "sweeps[0].priorty",
            5,
            "did you mean 'priority'?",
        ),
        (JOB + "zzz = 1", "jobs[0].zzz", 4, "unknown key; expected one of: name, command"),
        (JOB + "grid = { a = [1] }", "jobs[0].grid", 4, "only allowed in [[sweeps]]"),
        (JOB + '[defaults]\nname = "x"', "defaults.name", 5, "name cannot have a default"),
        ('command = ["x"]\n' + JOB, "command", 1, "belongs in a [[jobs]] or [[sweeps]] table"),
        ("gpus = 1\n" + JOB, "gpus", 1, "[[sweeps]] table, or in [defaults]"),
        (JOB + "[station.x]\nslots = 1", "station.x", 4, "expected one of: backend, policy"),
        (JOB + "[jobs.env]\nA = 1\n[jobs.envv]\nB = 1", "jobs[0].envv", 6, "mean 'env'?"),
    ],
)
def test_unknown_keys_at_every_level(text: str, key: str, line: int, fragment: str) -> None:
    problem = only_problem(text)
    assert (problem.key, problem.line) == (key, line)
    assert fragment in problem.message


@pytest.mark.parametrize(
    ("command", "shell", "fragment"),
    [
        ("[]", "false", "the command is empty: expected at least the program to run"),
        ('"  "', "true", "the command is empty"),
        ('"python train.py"', "false", "or set shell = true to run it through /bin/sh"),
        ('["a", "b"]', "true", "with shell = true the command must be one string"),
        ('["", "b"]', "false", "the program (first argument) is empty"),
        ('["a", 1]', "false", "argument 1 should be a string, found 1 (integer)"),
        ("3", "false", "expected a list of strings, found 3 (integer)"),
    ],
)
def test_bad_commands(command: str, shell: str, fragment: str) -> None:
    text = f'[[jobs]]\nname = "a"\nshell = {shell}\ncommand = {command}\n'
    problem = only_problem(text)
    assert (problem.key, problem.line) == ("jobs[0].command", 4)
    assert fragment in problem.message


def test_missing_name_and_command_point_at_the_table_header() -> None:
    text = JOB + JOB + "[[jobs]]\ngpus = 1\n"
    found = problems(text)
    assert [(p.key, p.line) for p in found] == [("jobs[2].name", 7), ("jobs[2].command", 7)]
    assert found[0].message == "missing: every job needs a name"
    assert "missing: every job needs a command" in found[1].message


def test_unknown_dataset_with_did_you_mean() -> None:
    text = '[datasets.digits]\n[[jobs]]\nname = "a"\ncommand = ["x"]\ndataset = "digit"\n'
    problem = only_problem(text)
    assert (problem.key, problem.line) == ("jobs[0].dataset", 5)
    assert problem.message == "unknown dataset 'digit'; did you mean 'digits'?"


def test_unknown_dataset_without_any_defined() -> None:
    problem = only_problem(JOB + '[defaults]\ndataset = "cifar"\n')
    assert problem.key == "defaults.dataset"
    assert "define it with a [datasets.cifar] table" in problem.message


def test_duplicate_names_name_both_sources() -> None:
    text = source("""
        [[jobs]]
        name = "a[x=1]"
        command = ["y"]

        [[sweeps]]
        name = "a"
        command = ["y", "{x}"]
        grid = { x = [1, 2] }
    """)
    problem = only_problem(text)
    assert (problem.key, problem.line) == ("sweeps[0].name", 6)
    assert problem.message == (
        "duplicate job name 'a[x=1]': jobs[0] (line 2) makes a job with the same name"
    )


def test_duplicate_names_from_one_template() -> None:
    text = source("""
        [[sweeps]]
        name = "s-{lr}"
        command = ["y", "{lr}", "{h}"]
        grid = { lr = [1, 2], h = [3, 4] }
        repeat = 2
    """)
    problem = only_problem(text)
    assert (problem.key, problem.line) == ("sweeps[0].name", 2)
    assert "this sweep makes it more than once" in problem.message
    assert "the name template should use {h}, {repeat}" in problem.message


def test_job_name_template_without_repeat_clashes() -> None:
    problem = only_problem('[[jobs]]\nname = "a-{x}"\ncommand = ["y"]\nrepeat = 2\n')
    assert (problem.key, problem.line) == ("jobs[0].name", 2)
    assert problem.message == (
        "duplicate job name 'a-{x}': this job makes it more than once; "
        "the name template should use {repeat}"
    )


def test_unknown_placeholder_with_did_you_mean() -> None:
    text = source("""
        [[sweeps]]
        name = "s"
        command = [
            "python",
            "--lr={lrr}",
        ]
        env = { HOME_DIR = "${HOME}" }
        grid = { lr = [0.1] }
    """)
    problem = only_problem(text)
    assert (problem.key, problem.line) == ("sweeps[0].command", line_of(text, "{lrr}"))
    assert problem.message == "unknown placeholder {lrr}; did you mean {lr}? (the grid defines: lr)"


def test_unknown_placeholder_in_env_and_workdir() -> None:
    text = '[[sweeps]]\nname = "s"\ncommand = ["{a}"]\nenv = { X = "{b}" }\nworkdir = "{c}"\n'
    text += "grid = { a = [1] }\n"
    found = problems(text)
    assert [(p.key, p.line) for p in found] == [("sweeps[0].env.X", 4), ("sweeps[0].workdir", 5)]


def test_unused_grid_parameter() -> None:
    text = '[[sweeps]]\nname = "s"\ncommand = ["x", "{a}"]\n[sweeps.grid]\na = [1]\nb = [1, 2]\n'
    problem = only_problem(text)
    assert (problem.key, problem.line) == ("sweeps[0].grid.b", 6)
    assert "would create identical jobs" in problem.message


@pytest.mark.parametrize(
    ("grid", "key", "fragment"),
    [
        ("[1]", "sweeps[0].grid", "expected a table of parameter = [values], found [1] (array)"),
        ("{}", "sweeps[0].grid", "the grid is empty"),
        ("{ x = 0.1 }", "sweeps[0].grid.x", "expected a non-empty array of strings, numbers"),
        ("{ x = [] }", "sweeps[0].grid.x", "found an empty array"),
        ("{ x = [[1]] }", "sweeps[0].grid.x", "value 0 should be a string, number or boolean"),
        ("{ x = [1, 1] }", "sweeps[0].grid.x", "the value 1 appears more than once"),
        ("{ repeat = [1] }", "sweeps[0].grid.repeat", "'repeat' is reserved"),
        ('{ "a-b" = [1] }', "sweeps[0].grid.a-b", "a parameter name must be letters"),
    ],
)
def test_bad_grids(grid: str, key: str, fragment: str) -> None:
    text = f'[[sweeps]]\nname = "s"\ncommand = ["{{x}}"]\ngrid = {grid}\n'
    problem = only_problem(text)
    assert (problem.key, problem.line) == (key, 4)
    assert fragment in problem.message


def test_missing_grid_and_too_many_parameters() -> None:
    assert only_problem('[[sweeps]]\nname = "s"\ncommand = ["x"]\n').key == "sweeps[0].grid"
    params = ", ".join(f"p{i} = [1]" for i in range(65))
    problem = only_problem(f'[[sweeps]]\nname = "s"\ncommand = ["x"]\ngrid = {{ {params} }}\n')
    assert problem.message == "expected at most 64 parameters, found 65"


def test_substituted_values_are_checked_again() -> None:
    text = '[[sweeps]]\nname = "s"\ncommand = ["{prog}", "a"]\ngrid = { prog = ["ok", ""] }\n'
    problem = only_problem(text)
    assert (problem.key, problem.line) == ("sweeps[0].command", 3)
    assert problem.message == "with prog=: the program (first argument) is empty"


@pytest.mark.parametrize(
    "value, spelled",
    [("a\\u001b[31mb", "a\\x1b[31mb"), ("a\\nb", "a\\x0ab"), ("a\\u202eb", "a\\u202eb")],
)
def test_a_grid_value_in_a_problem_is_spelled_out_on_one_line(value: str, spelled: str) -> None:
    text = '[[sweeps]]\nname = "s{x}"\ncommand = ["echo", "{x}"]\n'
    text += f'grid = {{ x = ["{value}"] }}\n'
    problem = only_problem(text)
    assert problem.key == "sweeps[0].name"
    assert problem.message.startswith(f"with x={spelled}: a name cannot contain control")
    assert problem.message.isprintable()


def test_expansion_past_max_jobs_is_rejected_without_materialising() -> None:
    # 2**65 jobs: only counting them can finish. Judged by the memory the check takes, not by
    # a clock (which a loaded machine stretches): ~50 KB here, where 10,000 jobs made take ~20
    # MB (about 2 KB a job), so even a few hundred made would show.
    params = [f"p{i}" for i in range(64)]
    grid = ", ".join(f"{p} = [1, 2]" for p in params)
    command = ", ".join(f'"{{{p}}}"' for p in params)
    text = f'[[sweeps]]\nname = "big"\ncommand = [{command}]\ngrid = {{ {grid} }}\nrepeat = 2\n'
    tracemalloc.start()
    try:
        problem = only_problem(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"the check took {peak:,} bytes: it made jobs"
    assert (problem.key, problem.line) == ("sweeps[0]", 1)
    assert problem.message == (
        f"expands to {2**65:,} jobs, more than the limit of {MAX_JOBS:,} jobs per profile"
    )


def test_expansion_past_max_jobs_across_tables() -> None:
    sweep = '[[sweeps]]\nname = "s{n}"\ncommand = ["x", "{v}"]\ngrid = { v = [1, 2, 3, 4, 5, 6] }\n'
    sweep += "repeat = 1000\n"
    text = sweep.replace("{n}", "1") + sweep.replace("{n}", "2") + JOB
    problem = only_problem(text)
    assert (problem.key, problem.line) == ("", None)
    assert problem.message == (
        "the profile expands to 12,001 jobs, more than the limit of 10,000 "
        "(the largest part is sweeps[0] with 6,000)"
    )


def test_exactly_max_jobs_is_fine() -> None:
    text = '[[sweeps]]\nname = "s"\ncommand = ["x", "{v}"]\n'
    text += f"grid = {{ v = [{', '.join(map(str, range(10)))}] }}\nrepeat = 1000\n"
    assert len(parse(text).jobs) == MAX_JOBS


def test_empty_profile() -> None:
    for text in ('name = "x"\n', "jobs = []\n"):
        problem = only_problem(text)
        assert (problem.key, problem.line) == ("", None)
        assert problem.message == "the profile defines no jobs: add a [[jobs]] or [[sweeps]] table"


def test_subtable_of_an_array_element_and_dotted_keys() -> None:
    text = source("""
        station.slots = 0

        [[jobs]]
        name = "a"
        command = ["x"]

        [jobs.env]
        "1X" = "y"

        [[jobs]]
        name = "b"
        command = ["x"]
        gpus = "x"
    """)
    found = problems(text)
    assert [(p.key, p.line) for p in found] == [
        ("station.slots", 1),
        ("jobs[0].env", line_of(text, "[jobs.env]")),
        ("jobs[1].gpus", line_of(text, 'gpus = "x"')),
    ]


def test_deep_values_still_give_a_problem() -> None:
    # Deeper than the line locator follows, shallower than the TOML reader's recursion limit.
    text = JOB + "gpus = " + "[" * 100 + "]" * 100 + "\n" + 'priority = "x"\n'
    found = problems(text)
    assert [(p.key, p.line) for p in found] == [("jobs[0].gpus", 4), ("jobs[0].priority", 5)]


def test_many_problems_are_reported_together_in_line_order() -> None:
    text = source("""
        nam = "x"
        [station]
        slots = -1
        [[jobs]]
        name = "a"
        command = "echo"
        [[jobs]]
        name = "a"
        command = ["x"]
        gpus = 100
        [[sweeps]]
        name = "s"
        command = ["x"]
        grid = { lr = [1] }
    """)
    with pytest.raises(ProfileError) as info:
        parse(text)
    assert [(p.key, p.line) for p in info.value.problems] == [
        ("nam", 1),
        ("station.slots", 3),
        ("jobs[0].command", 6),
        ("jobs[1].gpus", 10),
        ("sweeps[0].grid.lr", 14),
    ]
    assert str(info.value).count("\n") == 4


# --- reading files and raw bytes ---------------------------------------------------------------


def test_non_utf8_bytes() -> None:
    problem = only_problem(b'name = "ok"\n# caf\xe9\n' + JOB.encode())
    assert (problem.key, problem.line) == ("", 2)
    assert "not valid UTF-8: byte 0xe9 at offset 17 (line 2, column 6)" in problem.message


def test_too_large_bytes() -> None:
    problem = only_problem(b"#" * (MAX_PROFILE_BYTES + 1))
    assert (problem.key, problem.line) == ("", None)
    assert problem.message == (
        "the file is 1.0 MiB (1,048,577 bytes); a profile may be at most 1.0 MiB (1,048,576 bytes)"
    )


def test_too_large_file_is_rejected_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    with open(path, "wb") as handle:
        handle.truncate(50 * MAX_PROFILE_BYTES)  # sparse: nothing is written or read
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert "the file is 50.0 MiB (52,428,800 bytes)" in str(info.value)


@pytest.mark.parametrize("opener", ["[", "{ a = "])
def test_deep_nesting_is_a_profile_error(opener: str) -> None:
    problem = only_problem(("a = " + opener * 100_000).encode())
    assert problem.key == ""
    assert "nested too deeply" in problem.message


def test_missing_file(tmp_path: Path) -> None:
    (tmp_path / "quickstart.toml").write_text(JOB)
    with pytest.raises(ProfileError) as info:
        load_profile(tmp_path / "quickstart")
    [problem] = info.value.problems
    assert (problem.path, problem.line, problem.key) == (str(tmp_path / "quickstart"), None, "")
    assert problem.message == f"no such file; did you mean {str(tmp_path / 'quickstart.toml')!r}?"

    with pytest.raises(ProfileError, match=r"no such file$"):
        load_profile(tmp_path / "elsewhere" / "zzz.toml")


def test_directory_given(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(tmp_path)
    assert str(info.value) == f"{tmp_path}: is a directory; give the path of a profile .toml file"


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads anything")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.toml"
    path.write_text(JOB)
    path.chmod(0)
    with pytest.raises(ProfileError, match="permission denied"):
        load_profile(path)


def test_permission_denied_is_a_profile_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(JOB)

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    # the file is opened by gpudesk.named_file (bounded, as every file a user names)
    monkeypatch.setattr(named_file, "open", refuse, raising=False)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(info.value) == f"{path}: permission denied: cannot read the file"


def test_nul_in_path() -> None:
    with pytest.raises(ProfileError, match="not a valid file path"):
        load_profile("bad\0name.toml")


# --- properties --------------------------------------------------------------------------------


def _toml_string(text: str) -> str:
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


def render_toml(document: dict[str, Any], headers: bool) -> str:
    """Hand-rendered TOML; with `headers`, tables become [table] / [[array]] sections."""
    lines: list[str] = []
    sections: list[str] = []
    for key, value in document.items():
        name = _toml_string(key)
        if headers and isinstance(value, dict):
            sections.append(f"[{name}]")
            sections += [f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items()]
        elif (
            headers
            and isinstance(value, list)
            and value
            and all(isinstance(v, dict) for v in value)
        ):
            for item in value:
                sections.append(f"[[{name}]]")
                sections += [f"{_toml_string(k)} = {_toml_value(v)}" for k, v in item.items()]
        else:
            lines.append(f"{name} = {_toml_value(value)}")
    return "\n".join(lines + sections) + "\n"


_scalars = st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=12)
_any_key = st.sampled_from(["name", "gpus", "env", "lr", "grid", "x"]) | st.text(max_size=6)
_any_value = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_any_key, inner, max_size=3),
    max_leaves=6,
)
_words = st.sampled_from(["python", "t.py", "{lr}", "{repeat}", "${HOME}", "{nope}", "", "a b"])
_entry = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["a", "b", "s-{lr}", "r{repeat}", "a[lr=1]", ""]),
        "command": st.lists(_words, max_size=3) | _words,
        "shell": st.booleans(),
        "gpus": st.integers(-1, 65),
        "memory_gb": st.floats(-1, 20000) | st.integers(0, 3),
        "repeat": st.integers(0, 3),
        "dataset": st.sampled_from(["digits", "digit", "bad name"]),
        "env": st.dictionaries(
            st.sampled_from(["A", "B", "1X"]),
            st.sampled_from(["1", "{lr}", "{repeat}"]),
            max_size=2,
        ),
        "workdir": st.sampled_from(["sub", "/tmp", "", "{lr}", "~"]),
        "grid": st.dictionaries(
            st.sampled_from(["lr", "h", "repeat", "a-b"]),
            st.lists(
                st.integers(0, 3) | st.floats(allow_nan=False) | st.text(max_size=3), max_size=3
            ),
            max_size=2,
        ),
        "gpu": _any_value,
    },
)
# Mostly valid tables, so that the success path is exercised too.
_good_optional = {
    "gpus": st.integers(0, 2),
    "env": st.just({"A": "1"}),
    "workdir": st.sampled_from(["sub", "/tmp", "~"]),
    "shell": st.just(False),
    "priority": st.integers(-5, 5),
}
_good_job = st.fixed_dictionaries(
    {
        "name": st.text("abc{}", min_size=1, max_size=4),
        "command": st.lists(st.sampled_from(["python", "{repeat}", "${X}"]), min_size=1),
    },
    optional={**_good_optional, "repeat": st.integers(1, 3)},
)
_good_sweep = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["s", "t", "s-{lr}-{repeat}"]),
        "command": st.just(["python", "--lr", "{lr}"]),
        "grid": st.fixed_dictionaries(
            {
                "lr": st.lists(
                    st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=3),
                    min_size=1,
                    max_size=3,
                )
            }
        ),
    },
    optional={**_good_optional, "repeat": st.integers(1, 2)},
)
_good_profiles = st.fixed_dictionaries(
    {"jobs": st.lists(_good_job, min_size=1, max_size=3, unique_by=lambda job: job["name"])},
    optional={
        "sweeps": st.lists(_good_sweep, max_size=2, unique_by=lambda sweep: sweep["name"]),
        "station": st.just({"backend": "none", "slots": 2}),
        "defaults": st.fixed_dictionaries({}, optional=_good_optional),
    },
)
_profiles = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["p", ""]) | _any_value,
        "station": st.fixed_dictionaries(
            {}, optional={"backend": st.sampled_from(["auto", "x"]), "slots": st.integers(-1, 3)}
        ),
        "defaults": st.fixed_dictionaries(
            {},
            optional={
                "gpus": st.integers(-1, 2),
                "env": st.just({"A": "1"}),
                "workdir": st.just("w"),
            },
        ),
        "datasets": st.dictionaries(
            st.sampled_from(["digits", "bad name"]),
            st.fixed_dictionaries({}, optional={"factory": st.sampled_from(["a.b:c", "bad"])}),
            max_size=2,
        ),
        "jobs": st.lists(_good_job | _entry, max_size=3),
        "sweeps": st.lists(_good_sweep | _entry, max_size=3),
    },
)


def _parses_or_fails_cleanly(data: bytes) -> None:
    try:
        profile = parse_profile(data, PATH)
    except ProfileError as exc:
        assert exc.problems
        line_count = data.count(b"\n") + 1
        for problem in exc.problems:
            assert problem.line is None or 1 <= problem.line <= line_count
            assert problem.path == PATH
        return
    assert profile.jobs and len(profile.jobs) <= MAX_JOBS
    assert len({job.name for job in profile.jobs}) == len(profile.jobs)
    assert all(job.workdir and os.path.isabs(job.workdir) for job in profile.jobs)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash(data: bytes) -> None:
    _parses_or_fails_cleanly(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(FULL)), st.integers(0, 20), st.text(max_size=6))
def test_mutated_profiles_never_crash(position: int, cut: int, insert: str) -> None:
    text = source(FULL)
    _parses_or_fails_cleanly((text[:position] + insert + text[position + cut :]).encode())


# Generating nested documents costs far more than parsing them, hence fewer examples.
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _good_profiles | _profiles | st.dictionaries(_any_key, _any_value, max_size=4), st.booleans()
)
def test_generated_documents_never_crash(document: dict[str, Any], headers: bool) -> None:
    _parses_or_fails_cleanly(render_toml(document, headers).encode())


def test_selection_on_a_dataset_and_on_a_job() -> None:
    profile = parse("""
        [datasets.digits]
        factory = "gpudesk.workloads.data:make_digits"
        args = { split = "train" }
        selection = "Dedup-25"
        selection_target = "gpudesk.workloads.data:make_digits"
        selection_target_args = { split = "target" }

        [[jobs]]
        name = "own"
        command = ["true"]
        dataset = "digits"

        [[jobs]]
        name = "other"
        command = ["true"]
        dataset = "digits"
        selection = "full"
    """)
    spec = profile.datasets["digits"].loader
    assert spec is not None and spec.selection == "dedup-25"
    assert spec.argv()[-6:] == [
        "--selection",
        "dedup-25",
        "--target",
        "gpudesk.workloads.data:make_digits",
        "--target-arg",
        'split="target"',
    ]
    own, other = profile.jobs
    assert own.selection is None and other.selection == "full"
    assert spec.variant(other.selection).name == "digits.full"
    assert spec.variant(other.selection).selection is None
    assert spec.variant("dedup-25") is spec


def test_after_orders_the_jobs_and_names_them_within_the_request() -> None:
    profile = parse(
        """
        [[jobs]]
        name = "eval"
        command = ["true"]
        after = ["train-{lr}"]
        [[jobs]]
        name = "prep"
        command = ["true"]
        time_limit = "1:30:00"
        [[sweeps]]
        name = "train-{lr}"
        command = ["true"]
        grid = { lr = [1, 2] }
        after = "prep"
        time_limit = 90
        """
    )
    # prep first, then the sweep, then eval: each after the tables it names
    assert [job.name for job in profile.jobs] == ["prep", "train-1", "train-2", "eval"]
    # -k is the k-th job of the submit request (no ids yet); the store puts the ids in
    assert [job.after for job in profile.jobs] == [(), (-1,), (-1,), (-2, -3)]
    assert [job.time_limit_s for job in profile.jobs] == [5400.0, 5400.0, 5400.0, None]


@pytest.mark.parametrize(
    "tables, fragment",
    [
        ('after = ["zz"]', "no [[jobs]] or [[sweeps]] named 'zz' in this profile"),
        ('after = ["a"]', "a job cannot run after itself"),
        ("after = []", "expected the names of jobs or sweeps"),
        ("after = [3]", "expected a string"),
        ("time_limit = 1.5", 'expected a duration such as "2h"'),
        ('time_limit = "soon"', "is not a duration"),
        ('time_limit = "0s"', "a time limit is 1 s to 366 days"),
    ],
)
def test_bad_after_and_time_limit(tables: str, fragment: str) -> None:
    problem = only_problem(f'[[jobs]]\nname = "a"\ncommand = ["true"]\n{tables}\n')
    assert fragment in problem.message


def test_a_circle_of_after_is_a_problem() -> None:
    problem = only_problem(
        '[[jobs]]\nname = "a"\ncommand = ["true"]\nafter = "b"\n'
        '[[jobs]]\nname = "b"\ncommand = ["true"]\nafter = "a"\n'
    )
    assert "run after each other in a circle" in problem.message and "a -> b" in problem.message


def test_after_any_and_after_notok_order_and_name_jobs_as_after_does() -> None:
    profile = parse(
        """
        [[jobs]]
        name = "cleanup"
        command = ["true"]
        after_any = ["train-{lr}", "report"]
        [[jobs]]
        name = "report"
        command = ["true"]
        after = "train-{lr}"
        [[jobs]]
        name = "on-failure"
        command = ["true"]
        after_notok = "train-{lr}"
        [[sweeps]]
        name = "train-{lr}"
        command = ["true"]
        grid = { lr = [1, 2] }
        """
    )
    # each after every table it names, whatever the kind; then file order
    names = [job.name for job in profile.jobs]
    assert names == ["train-1", "train-2", "report", "cleanup", "on-failure"]
    deps = {job.name: (job.after, job.after_any, job.after_notok) for job in profile.jobs}
    assert deps["report"] == ((-1, -2), (), ())
    assert deps["cleanup"] == ((), (-1, -2, -3), ())
    assert deps["on-failure"] == ((), (), (-1, -2))


@pytest.mark.parametrize("kind", ["after_any", "after_notok"])
@pytest.mark.parametrize(
    "value, fragment",
    [
        ('["zz"]', "no [[jobs]] or [[sweeps]] named 'zz' in this profile ({kind} names"),
        ('["a"]', "a job cannot run after itself"),
        ("[]", "expected the names of jobs or sweeps"),
    ],
)
def test_bad_after_any_and_after_notok(kind: str, value: str, fragment: str) -> None:
    problem = only_problem(f'[[jobs]]\nname = "a"\ncommand = ["true"]\n{kind} = {value}\n')
    assert problem.key == f"jobs[0].{kind}" and fragment.format(kind=kind) in problem.message


def test_a_table_named_by_both_after_and_after_notok_is_a_problem() -> None:
    """Its jobs would have to succeed and not succeed: the job could never start (Slurm's
    DependencyNeverSatisfied), so the profile is refused before anything is submitted."""
    problem = only_problem(
        '[[jobs]]\nname = "prep"\ncommand = ["true"]\n'
        '[[jobs]]\nname = "b"\ncommand = ["true"]\nafter = ["prep"]\nafter_notok = "prep"\n'
    )
    assert problem.key == "jobs[1].after_notok" and problem.line == 8, problem
    assert problem.message.startswith("after and after_notok both name 'prep'"), problem


def test_a_circle_through_after_any_is_a_problem() -> None:
    problem = only_problem(
        '[[jobs]]\nname = "a"\ncommand = ["true"]\nafter_notok = "b"\n'
        '[[jobs]]\nname = "b"\ncommand = ["true"]\nafter_any = "a"\n'
    )
    assert "run after each other in a circle" in problem.message and "a -> b" in problem.message


def test_after_cannot_be_a_default() -> None:
    problem = only_problem('[defaults]\nafter = ["a"]\n[[jobs]]\nname = "a"\ncommand = ["true"]\n')
    assert problem.key == "defaults.after" and "unknown key" in problem.message


def test_preemptible_jobs_from_a_profile_and_its_defaults() -> None:
    profile = parse(
        """
        [defaults]
        preemptible = true
        preempt_grace_s = 300
        [[jobs]]
        name = "long"
        command = ["true"]
        preempt_signal = "usr2"
        [[jobs]]
        name = "eval"
        command = ["true"]
        preemptible = false
        """
    )
    long, evaluation = profile.jobs
    assert (long.preemptible, long.preempt_signal, long.preempt_grace_s) == (
        True,
        "SIGUSR2",
        300.0,
    )
    assert not evaluation.preemptible and evaluation.preempt_signal == "SIGUSR1"


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('preempt_signal = "KILL"', "expected one of SIGUSR1, SIGUSR2"),
        ("preempt_grace_s = 0", "expected a number from 1 to 3600"),
        ('preemptible = "yes"', "expected true or false"),
    ],
)
def test_bad_preemption_keys(line: str, fragment: str) -> None:
    problem = only_problem(f'[[jobs]]\nname = "a"\ncommand = ["true"]\n{line}\n')
    assert fragment in problem.message


def test_begin_comment_and_notify_are_profile_keys_as_submit_options() -> None:
    before = time.time()
    parsed = parse(
        """
        [defaults]
        comment = "lr sweep, take 2"
        notify = "echo $GPUDESK_JOB_STATE"

        [[jobs]]
        name = "later"
        command = ["true"]
        begin = "now+10min"

        [[jobs]]
        name = "at"
        command = ["true"]
        begin = 2026-12-24T18:00:00Z
        """
    )
    later, at = parsed.jobs
    assert before + 600 <= (later.begin_at or 0) <= time.time() + 600
    assert at.begin_at == 1798135200.0
    assert later.comment == at.comment == "lr sweep, take 2"
    assert later.notify == "echo $GPUDESK_JOB_STATE"
    with pytest.raises(ProfileError) as caught:
        parse(JOB + 'begin = "soonish"\ncomment = "a\\u0007b"\n')
    text = str(caught.value)
    assert "jobs[0].begin: 'soonish' is not a begin time" in text
    assert "jobs[0].comment: a comment cannot contain control characters" in text


def test_a_defaults_time_limit_applies_to_every_job_that_gives_none() -> None:
    """`[defaults] time_limit` was accepted and dropped: every job ran without a limit."""
    profile = parse(
        """
        [defaults]
        time_limit = "1h"
        [[jobs]]
        name = "long"
        command = ["true"]
        [[jobs]]
        name = "short"
        command = ["true"]
        time_limit = 5
        """
    )
    assert [(job.name, job.time_limit_s) for job in profile.jobs] == [
        ("long", 3600.0),
        ("short", 300.0),
    ]
