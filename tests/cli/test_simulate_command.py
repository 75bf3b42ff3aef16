"""`gpudesk simulate` as a command: its JSON, its table and its errors (the simulator itself:
tests/policy/test_simulator.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
