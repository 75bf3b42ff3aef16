"""`gpudesk simulate` as a command: its JSON, its table and its errors (the simulator itself:
tests/policy/test_simulator.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_simulator import write_trace


def test_the_cli_prints_json(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, [{}, {"peak_memory_mb": 200000}])
    truth = tmp_path / "truth.json"
    truth.write_text('{"mps_tenant_cost": 0.15}')
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpudesk",
            "simulate",
            str(trace),
            "--station",
            "sim:h100x2",
            "--policy",
            "exclusive,carma,auto",
            "--truth",
            str(truth),
            "--mig",
            "1=3g.40gb",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    assert data["simulated"] and data["label"] == "SIMULATED" and data["station"] == "sim:h100x2"
    assert data["truth"]["mps_tenant_cost"] == 0.15 and data["mig"] == {"1": ["3g.40gb"]}
    assert [r["policy"] for r in data["results"]] == ["exclusive", "carma", "auto"]
    assert all(r["impossible"] == 1 for r in data["results"])
    assert "learned_params" in data["results"][2] and "auto_vs_carma" in data["ratios"]


def test_the_cli_table_and_errors(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpudesk.cli.common import CliError
    from gpudesk.cli.main import build_app

    app = build_app()
    trace = write_trace(tmp_path, [{}, {"sm_pct": 80}])
    runner = CliRunner()
    result = runner.invoke(app, ["simulate", str(trace), "--policy", "exclusive,mps,carma,auto"])
    assert result.exit_code == 0, result.output
    assert "auto ÷ carma" in result.output and "auto ÷ best forced mode (" in result.output
    # `gpudesk` prints a CliError as "error: MESSAGE" and exits with its code
    bad = runner.invoke(app, ["simulate", str(trace), "--mig", "0=9g.99gb"])
    assert isinstance(bad.exception, CliError) and bad.exception.code == 2
    assert "unknown MIG profile" in str(bad.exception)
    none_fit = write_trace(tmp_path, [{"peak_memory_mb": 500000}])
    ends = runner.invoke(app, ["simulate", str(none_fit), "--station", "sim:h100"])
    assert isinstance(ends.exception, CliError) and ends.exception.code == 1
    assert "no job of t can run on sim:h100" in str(ends.exception)


def test_lower_bound_in_the_table_and_the_json(tmp_path: Path) -> None:
    """Three 60-minute full-GPU jobs on one GPU: LB 3h00m (their SM work), mean JCT bound 1h00m;
    exclusive reaches 1.00 of the makespan bound and 2.00 of the JCT one (ends at 1, 2, 3 h).
    Forced mig on a GPU not in MIG mode is no mode this station runs: not the best forced."""
    from typer.testing import CliRunner

    from gpudesk.cli.main import build_app

    app = build_app()
    trace = write_trace(tmp_path, [{"sm_pct": 100.0, "exclusive_minutes": 60}] * 3)
    runner = CliRunner()
    args = ["simulate", str(trace), "--station", "sim:a100-40gb", "--lower-bound"]
    text = runner.invoke(app, [*args, "--policy", "exclusive,mig,auto"], env={"COLUMNS": "120"})
    assert text.exit_code == 0, text.output
    header = next(line.split() for line in text.output.splitlines() if "MAKESPAN" in line)
    assert header[:6] == ["POLICY", "MAKESPAN", "x", "÷LB", "MEAN", "JCT"]
    exclusive = next(line.split() for line in text.output.splitlines() if line.startswith("excl"))
    assert exclusive[1:6] == ["3h00m", "1.00", "1.00", "2h00m", "2.00"]
    assert "lower bound (SIMULATED truth): makespan 3h00m" in text.output
    assert "mig: not a mode this station can run as given" in text.output
    out = runner.invoke(app, [*args, "--policy", "exclusive,mig,auto", "--json"])
    data = json.loads(out.output)
    bound = data["lower_bound"]
    assert (bound["makespan_s"], bound["arrival_term_s"], bound["mean_jct_s"]) == (
        10800.0,
        3600.0,
        3600.0,
    )
    # three full-GPU hours on one GPU: whatever the order, they leave at 1 h, 2 h and 3 h at best
    assert bound["mean_jct_queue_s"] == 7200.0
    assert bound["class_term"]["makespan_s"] == 10800.0  # one job-hour an hour, by class
    assert "2h00m counting the queueing no schedule avoids" in " ".join(text.output.split())
    assert bound["ratios"]["exclusive"] == {
        "makespan": 1.0,
        "mean_jct": 2.0,
        "mean_jct_queue": 1.0,
        "lost": 0,
    }
    assert data["ratios"]["best_forced"] == "exclusive"
    by = {r["policy"]: r for r in data["results"]}
    assert by["mig"]["not_runnable"] and by["exclusive"]["not_runnable"] is None
    assert by["exclusive"]["placement_classes"]["alone"] == 3
    assert [p["class"] for p in by["exclusive"]["job_placements"]] == ["alone"] * 3


def test_truth_takes_the_stored_h100_calibration_and_refuses_a_malformed_one(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from gpudesk.cli.common import CliError
    from gpudesk.cli.main import build_app

    app = build_app()
    trace = write_trace(tmp_path, [{}])
    saved = Path(__file__).parents[2] / "bench" / "results" / "calibrate-h100-8s.json"
    runner = CliRunner()
    good = runner.invoke(
        app, ["simulate", str(trace), "-p", "auto", "--truth", str(saved), "--json"]
    )
    assert good.exit_code == 0, good.output
    assert json.loads(good.output)["truth"]["mps_tenant_cost"] == pytest.approx(0.127, abs=5e-4)
    broken = tmp_path / "calibration.json"
    broken.write_text(json.dumps({"fitted": {"mps_tenant_cost": "high"}, "params": []}))
    bad = runner.invoke(app, ["simulate", str(trace), "--truth", str(broken)])
    assert isinstance(bad.exception, CliError) and bad.exception.code == 2
    assert "mps_tenant_cost must be a non-negative number" in str(bad.exception)


def test_a_truth_of_the_queueing_form_is_named_in_the_output_and_refuses_a_lower_bound(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from gpudesk.cli.common import CliError
    from gpudesk.cli.main import build_app

    app = build_app()
    trace = str(write_trace(tmp_path, [{}, {"sm_pct": 80}]))
    runner = CliRunner()
    result = runner.invoke(app, ["simulate", trace, "--truth-form", "queueing-all", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["truth_form"] == "queueing-all"
    table = runner.invoke(app, ["simulate", trace, "--truth-form", "queueing-h100"])
    assert "truth of the queueing-h100 form" in table.output
    for args, says in (
        (["--truth-form", "queueing-x"], "known: current, queueing-h100, queueing-all"),
        (["--truth-form", "queueing-all", "--lower-bound"], "own form only"),
    ):
        bad = runner.invoke(app, ["simulate", trace, *args])
        assert isinstance(bad.exception, CliError) and bad.exception.code == 2
        assert says in str(bad.exception)


def test_progress_lines_are_said_in_the_header_and_the_json(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpudesk.cli.main import build_app

    app = build_app()
    trace = str(write_trace(tmp_path, [{"progress": True}, {"arrival_s": 60}]))
    runner = CliRunner()
    some = runner.invoke(app, ["simulate", trace, "-p", "auto"], env={"COLUMNS": "200"})
    assert some.exit_code == 0, some.output
    assert "1 of 2 jobs print progress lines" in some.output
    every = runner.invoke(app, ["simulate", trace, "-p", "auto", "--progress-lines", "--json"])
    assert every.exit_code == 0, every.output
    assert json.loads(every.output)["progress_lines"] == 2
    table = runner.invoke(app, ["simulate", trace, "-p", "auto", "--progress-lines"])
    assert "every job prints progress lines" in " ".join(table.output.split())


def test_jobs_without_the_estimators_guess_are_said_and_an_absent_estimator_refused(
    tmp_path: Path,
) -> None:
    """Such a job's hint is its true peak: the header and the JSON say how many; an --estimator
    the user names that no job has a guess from is refused, not silently the true peaks."""
    from typer.testing import CliRunner

    from gpudesk.cli.common import CliError
    from gpudesk.cli.main import build_app

    app = build_app()
    trace = str(write_trace(tmp_path, [{"estimate_horus_mb": 3000}, {}, {"arrival_s": 60}]))
    runner = CliRunner()
    env = {"COLUMNS": "300"}
    some = runner.invoke(app, ["simulate", trace, "-p", "auto", "--estimator", "horus"], env=env)
    assert some.exit_code == 0, some.output
    assert "memory hints from horus (2 of 3 jobs have none: their true peak is used)" in (
        some.output
    )
    data = json.loads(
        runner.invoke(
            app, ["simulate", trace, "-p", "auto", "--estimator", "horus", "--json"]
        ).output
    )
    assert (data["estimator"], data["jobs_without_estimate"]) == ("horus", 2)
    every = runner.invoke(app, ["simulate", trace, "-p", "auto", "--json"])
    assert json.loads(every.output)["jobs_without_estimate"] == 0
    plain = runner.invoke(app, ["simulate", trace, "-p", "auto"], env=env)
    assert "jobs, memory hints from gpumemnet, learning on" in plain.output
    bad = runner.invoke(app, ["simulate", trace, "--estimator", "faketensor"])
    assert isinstance(bad.exception, CliError) and bad.exception.code == 2
    assert str(bad.exception) == (
        "--estimator faketensor: no job of t has a faketensor guess (estimate_faketensor_mb); "
        "the trace has guesses from gpumemnet, horus, and --estimator measured gives each job "
        "its true peak"
    )
    # a trace of no estimator's guesses still runs under the default, saying so
    bare = tmp_path / "bare.json"
    bare.write_text(
        json.dumps({"jobs": [{"arrival_s": 0, "exclusive_minutes": 5, "peak_memory_mb": 9}]})
    )
    default = runner.invoke(app, ["simulate", str(bare), "-p", "auto"], env=env)
    assert default.exit_code == 0, default.output
    assert "memory hints: each job's true peak (no job has a gpumemnet guess)" in default.output
    named = runner.invoke(app, ["simulate", str(bare), "--estimator", "gpumemnet"])
    assert isinstance(named.exception, CliError) and "no estimator's guesses" in str(
        named.exception
    )


def test_usage_errors_of_the_name_and_the_policies(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpudesk.cli.common import CliError
    from gpudesk.cli.main import build_app

    app = build_app()
    runner = CliRunner()
    trace = str(write_trace(tmp_path, [{}]))
    for args, says in (
        # the same policy twice printed the same row twice
        (
            ["simulate", trace, "--policy", "auto,mps,auto"],
            "--policy: auto is named more than once",
        ),
        # an empty name was "cannot read the trace ." (the current folder)
        (["simulate", ""], "the trace's name is empty"),
    ):
        bad = runner.invoke(app, args)
        assert isinstance(bad.exception, CliError) and bad.exception.code == 2, bad.output
        assert says in str(bad.exception)


def test_a_trace_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """As `gpudesk` prints it: one error line naming the file, the job and the field."""
    path = tmp_path / "e.json"
    path.write_text(
        '{"jobs":[{"id":7,"arrival_s":0,"exclusive_minutes":10,"peak_memory_mb":100,"gpus":1.9}]}'
    )
    out = subprocess.run(
        [sys.executable, "-m", "gpudesk", "simulate", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        f"error: {path}: jobs[0] (id 7): gpus: expected a whole number from 1 to 64, found 1.9 "
        "(number)\n"
    )


def test_the_lower_bound_counts_one_class_and_one_job_in_the_singular(tmp_path: Path) -> None:
    from dataclasses import replace

    from gpudesk.cli.simulate import _bound_lines
    from gpudesk.policy.sim_bound_burst import BurstTerm
    from gpudesk.policy.sim_bounds import bound_of
    from gpudesk.policy.simulator import Simulation, load_trace

    trace = load_trace(write_trace(tmp_path, [{"sm_pct": 100.0}] * 2))
    bound = bound_of(Simulation(trace, policy="exclusive", station="sim:h100"))
    assert bound.class_term is not None and len(bound.class_term.classes) == 1
    burst = BurstTerm(bound.arrival_term_s + 60.0, 0.0, 1, 1.0)
    text = " ".join(_bound_lines(replace(bound, burst_term=burst)))
    assert "1 class of job;" in text and "(1 job of one program from" in text


@pytest.mark.parametrize("columns", [40, 80])
def test_the_table_fits_the_terminal_keeping_makespan_energy_and_their_ratios(
    tmp_path: Path, columns: int
) -> None:
    """At 40 columns the other times give way, named in a line; the policies stay whole."""
    from typer.testing import CliRunner

    from gpudesk import render
    from gpudesk.cli.main import build_app

    trace = write_trace(tmp_path, [{"sm_pct": 100.0, "exclusive_minutes": 60}] * 3)
    args = ["simulate", str(trace), "--station", "sim:a100-40gb", "--lower-bound"]
    out = CliRunner().invoke(build_app(), args, env={"COLUMNS": str(columns)})
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert all(render.cell_width(line) <= columns for line in lines), "\n" + out.output
    header = next(line.split() for line in lines if "MAKESPAN" in line)
    assert header[:3] == ["POLICY", "MAKESPAN", "x"] and header[-2:] == ["kWh", "x"]
    assert {"exclusive", "auto"} <= {line.split()[0] for line in lines if line}
    if columns == 40:
        said = " ".join(out.output.split())
        assert "(MEAN JCT, MEAN WAIT, P95 JCT, GPU-H, ÷LB in --json or a wider" in said
