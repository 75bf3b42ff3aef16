"""`gpudesk queue`'s filters pick jobs before `--limit` cuts them, and the line that says what
the limit left out counts only the jobs that match: `--state held` (the CLI's own filter) as
`--name`, `--group` and `--state` (the engine's). Real engine, real CLI (in process)."""

from __future__ import annotations

import os

from gpudesk.core.jobs import JobSpec
from tests.conftest import EngineHandle, Run


def held(engine: EngineHandle, *jobs: dict) -> list[int]:
    specs = [JobSpec.from_dict({"workdir": str(engine.home.root), **job}) for job in jobs]
    return engine.api.submit_jobs(specs, env=dict(os.environ), hold=True).ids


def ids_listed(out: str) -> list[int]:
    return [int(line.split()[0]) for line in out.splitlines()[1:] if line.split()[0].isdigit()]


def test_the_limit_and_its_line_count_only_the_jobs_that_match(
    engine: EngineHandle, gpudesk: Run
) -> None:
    true = ["true"]
    once = held(engine, *({"name": f"once-{i}", "command": true} for i in range(4)))
    others = held(engine, *({"name": f"other-{i}", "command": true} for i in range(12)))
    grouped = held(engine, *({"name": f"g-{i}", "command": true, "group": "g"} for i in range(3)))
    # queued, not held: each waits for a held job
    after = {"command": true, "after": [once[0]]}
    waiting = engine.submit(*({"name": f"w-{i}", **after} for i in range(5)))

    # every match older than the newest 10 jobs is shown, and nothing said left out
    code, out, err = gpudesk("queue", "--all", "--name", "once*", "--limit", "10")
    assert code == 0, err
    assert ids_listed(out) == once and "not shown" not in out, out
    code, out, _ = gpudesk("queue", "--all", "--name", "once*", "--limit", "3")
    assert ids_listed(out) == once[1:]
    assert out.rstrip().endswith("… and 1 older matching job not shown; --limit N shows more")
    # --state held among the waiting: the held ones alone counted
    code, out, _ = gpudesk("queue", "--state", "held", "--limit", "18")
    assert ids_listed(out) == once + others + grouped[:2], out
    assert out.rstrip().endswith("… and 1 more matching waiting (of 19); --limit 19 shows them all")
    code, out, _ = gpudesk("queue", "--all", "--state", "held", "--name", "g-*", "--limit", "2")
    assert ids_listed(out) == grouped[:2]
    assert out.rstrip().endswith("… and 1 more matching waiting (of 3); --limit 3 shows them all")
    # the engine's own filters: the line counts what they match
    code, out, _ = gpudesk("queue", "--all", "--group", "g", "--limit", "1")
    assert ids_listed(out) == grouped[2:]
    assert "… and 2 older jobs not shown" in out, out
    code, out, _ = gpudesk("queue", "--state", "queued", "--name", "w-*", "--limit", "5")
    assert ids_listed(out) == waiting and "…" not in out, out
