"""A producer started by hand (`gpudesk loader serve`, as docs/loader.md says) after the engine
said it did not start one: the job's consumer waits for that producer and reads it.

Before: the consumer read the engine's word (`.not-started-NAME.json`) at once, while the
producer started by hand built its dataset (it writes its info file only once its first batch
is made), and failed blaming the engine although a producer was coming. The producer holds its
name's lock from its claim on; the consumer asks who holds it (station_access.name_holder).
Real daemon, a real producer run by hand, a real consumer job; the engine's own launch is
refused for real (its log a link, as in test_loader_restart_backoff.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from test_loader_engine import DATASET, consumer_job, epochs_of, loader_engine
from test_loader_restart_backoff import refuse_its_log

from gpudesk.core.jobs import TERMINAL_STATE_NAMES as ENDED

__all__ = ["loader_engine"]  # the fixture, used by name

# The dataset of DATASET, built only once the test opens its gate (a file), saying first that
# it is building: the producer holds its name meanwhile, with no info file yet.
GATED = textwrap.dedent("""
    import os, time
    from gpudesk.workloads.synthetic import make_dataset
    def make(gate, **kwargs):
        open(gate + ".building", "w").close()
        while not os.path.exists(gate):
            time.sleep(0.05)
        return make_dataset(**kwargs)
""")


def _text(path: Path) -> str:
    return " ".join(path.read_text().split()) if path.exists() else ""


@pytest.mark.slow(12)
def test_a_producer_started_by_hand_after_the_engine_refused_is_waited_for_and_read(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    refuse_its_log(loader_engine)  # every launch of the engine's own producer is refused
    modules, gate = tmp_path / "modules", tmp_path / "gate"
    modules.mkdir()
    (modules / "gd_gated.py").write_text(GATED)
    args = [f"{key}={json.dumps(value)}" for key, value in DATASET["args"].items()]
    serve = subprocess.Popen(
        [sys.executable, "-m", "gpudesk", "loader", "serve", "syn", "--dataset", "gd_gated:make"]
        + [f"--arg={arg}" for arg in args]
        + [f'--arg=gate="{gate}"', "--batch-size=8", "--seed=3", "--slots=8"],
        env={**os.environ, "PYTHONPATH": str(modules)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: Path(f"{gate}.building").exists(), 60.0, what="the producer to build")
        job, out = consumer_job(tmp_path, "by-hand", 1)
        (job_id,) = loader_engine.submit(job)
        log = loader_engine.home.attempt_dir(job_id, 1) / "output.log"
        engine_said = loader_engine.home.loader_dir / ".not-started-syn.json"
        # the engine's start is refused and it says so; the job's consumer passes that over
        wait_for(
            lambda: (
                engine_said.exists()
                and ("holds its name" in _text(log) or loader_engine.job(job_id).state in ENDED)
            ),
            60.0,
            what="the job's consumer to find the engine's word and the producer's name held",
        )
        gate.touch()
        (done,) = loader_engine.wait_all_done([job_id], timeout=60)
        said = _text(log)
        assert done.state == "succeeded", said
        assert [e["mode"] for e in epochs_of(out)] == ["shared"], said
        assert f"another producer (pid {serve.pid}) holds its name, although the engine " in said
        assert "did not start the producer of the shared loader 'syn'" in said, said
    finally:
        serve.terminate()
        print(serve.communicate(timeout=30)[0])
