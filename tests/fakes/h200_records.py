"""What nvidia-smi and nvidia-cuda-mps-control answered on a real H200 (driver 580.159.04, MIG
mode disabled, 2026-11-29), as the tests that replay those answers against the fakes read them.

Two records: the raw probe's JSON (bench/results/h200-2026-11-29/run2/raw_probe.json, written by
bench/hw_raw_probe.py) and the follow-up checks it did not make
(bench/results/h200-2026-11-29/extra/smi_mps_checks.txt)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "h200-2026-11-29"


class Answer(NamedTuple):
    rc: int
    stdout: str
    stderr: str


def raw_probe() -> dict[str, Any]:
    return json.loads((RESULTS / "run2" / "raw_probe.json").read_text())


def extra_checks() -> dict[str, Answer]:
    """The follow-up checks by command: `nvidia-smi ...` as run, `mps: <line>` for a line sent
    to nvidia-cuda-mps-control's stdin. The record shows output as `cat -A` does (`$` ends a
    line); lines that do not end so (a process list, the logs) are notes, not output."""
    answers: dict[str, Answer] = {}
    command, rc, streams, into = "", 0, {"out": [], "err": []}, ""
    lines = (RESULTS / "extra" / "smi_mps_checks.txt").read_text().splitlines()
    for line in [*lines, "### end"]:
        if line.startswith("### "):
            if command:
                text = {k: "".join(v[:-1] + "\n" for v in vs) for k, vs in streams.items()}
                answers[command] = Answer(rc, text["out"], text["err"])
            command, streams, into = line[4:], {"out": [], "err": []}, ""
        elif line.startswith("rc="):
            rc = int(line[3:])
        elif line in ("-out", "-err"):
            into = line[1:]
        elif command and into and line.endswith("$"):
            streams[into].append(line)
        else:
            into = ""  # a note ends the streams of its command
    return answers
