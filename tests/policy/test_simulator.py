"""The trace simulator as a judge: stations, MIG layouts, trace fields, estimators, truth,
learning and impossible jobs (`gpudesk simulate` itself: tests/cli/test_simulate_command.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpudesk.policy.interference import DEFAULT_PARAMS, ModelParams, params_from_json
from gpudesk.policy.sim_rates import job_workload
from gpudesk.policy.simulator import (
    ESTIMATORS,
    Simulation,
    TraceError,
    load_trace,
    load_truth,
    parse_mig,
)

A100_40 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"


def write_trace(tmp_path: Path, jobs: list[dict[str, Any]], station: str = "") -> Path:
    path = tmp_path / "trace.json"
    full = []
    for i, job in enumerate(jobs):
        base = {
            "id": i + 1,
            "arrival_s": 0,
            "exclusive_minutes": 30,
            "peak_memory_mb": 4000,
            "class": "light",
            "estimate_gpumemnet_mb": 4000,
        }
        full.append({**base, **job})
    path.write_text(json.dumps({"name": "t", "station": station, "jobs": full}))
    return path


@pytest.mark.parametrize(
    "station, model, count",
    [
        ("sim:a100-40gb", A100_40, 1),
        ("sim:a100-40gbx4", A100_40, 4),
        ("sim:a100-80gbx2", "NVIDIA A100-SXM4-80GB", 2),
        ("sim:h100x8", H100, 8),
        ("sim:h200", "NVIDIA H200", 1),
        ("sim:dgx-station-a100", A100_40, 4),
    ],
)
def test_stations_by_name(tmp_path: Path, station: str, model: str, count: int) -> None:
    sim = Simulation(load_trace(write_trace(tmp_path, [{}])), policy="auto", station=station)
    assert (sim.model.name, sim.gpu_count) == (model, count)
    assert {g.model for g in sim.view().gpu_states} == {model}


def test_a100_80gb_memory() -> None:
    from gpudesk.hw.telemetry.backend import make_backend

    assert make_backend("sim:a100-80gb").inventory()[0].memory_total_mib == 81920.0


def test_mig_layouts_parse() -> None:
    assert parse_mig("3=3g.20gb,2g.10gb,1g.5gb,1g.5gb", A100_40, 4) == {
        3: ("3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb")
    }
    assert parse_mig("0=,1=7g.40gb", A100_40, 2) == {0: (), 1: ("7g.40gb",)}
    assert parse_mig("0=3g.40gb,MIG 3g.40gb", H100, 1) == {0: ("3g.40gb", "3g.40gb")}


@pytest.mark.parametrize(
    "text, gpu, message",
    [
        ("3g.20gb", A100_40, "start with a GPU index"),
        ("x=3g.20gb", A100_40, "is not a GPU index"),
        ("4=3g.20gb", A100_40, "GPU 4 does not exist"),
        ("0=3g.20gb,0=1g.5gb", A100_40, "given twice"),
        ("0=3g.40gb", A100_40, "unknown MIG profile '3g.40gb'"),
        ("0=1g.5gb", H100, "unknown MIG profile '1g.5gb'"),
        ("0=1g.10gb", A100_40, "unknown MIG profile"),  # not offered by the simulated driver
        ("0=4g.20gb,3g.20gb,1g.5gb", A100_40, "does not fit GPU 0"),
        ("0=7g.40gb,1g.5gb", A100_40, "does not fit"),
        ("0=3g.20gb,,1g.5gb", A100_40, "empty profile"),
    ],
)
def test_mig_layout_errors(text: str, gpu: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_mig(text, gpu, 4)


def test_a_fixed_mig_layout_is_offered_as_is(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path, [{}]))
    sim = Simulation(trace, policy="auto", station="sim:h100x2", mig="1=3g.40gb,3g.40gb")
    states = sim.view().gpu_states
    assert not states[0].mig_enabled
    assert states[1].mig_enabled and not states[1].mig_dynamic
    assert [(s.profile, s.compute_slices) for s in states[1].mig_slices] == [
        ("3g.40gb", 3),
        ("3g.40gb", 3),
    ]
    # --mig-repartition changes layouts as the engine does (policy.mig_payoff), never by
    # letting the policy carve a MIG-mode GPU
    again = Simulation(
        trace, policy="auto", station="sim:h100x2", mig="1=3g.40gb", mig_repartition=True
    )
    assert not again.view().gpu_states[1].mig_dynamic and again.config.mig_repartition
    carved = Simulation(trace, policy="mig", station="sim:h100x2", mig="1=3g.40gb")
    assert [(g.mig_enabled, g.mig_dynamic) for g in carved.view().gpu_states] == [
        (True, True),
        (True, False),
    ]


def test_mig_repartition_recarves_an_idle_gpu_only_where_it_pays(tmp_path: Path) -> None:
    # four light jobs queued at a GPU with one whole-GPU instance: one at a time on it, or all
    # four at once on 1g.5gb slices after 10 s of change
    light = [{"sm_pct": 10, "exclusive_minutes": 30} for _ in range(4)]
    trace = load_trace(write_trace(tmp_path, light))
    fixed, recarved = (
        Simulation(
            trace, policy="auto", station="sim:a100-40gb", mig="0=7g.40gb", mig_repartition=again
        ).run()
        for again in (False, True)
    )
    assert fixed.repartitions == 0 and fixed.makespan_s == pytest.approx(4 * 1800, rel=0.01)
    assert recarved.repartitions == 1
    assert recarved.makespan_s < 0.5 * fixed.makespan_s
    assert recarved.modes == {"mig": 4}
    # one heavy job: the whole-GPU instance is its best slice, so the layout stays
    heavy = load_trace(write_trace(tmp_path, [{"sm_pct": 80, "exclusive_minutes": 30}]))
    kept = Simulation(
        heavy, policy="auto", station="sim:a100-40gb", mig="0=7g.40gb", mig_repartition=True
    ).run()
    assert kept.repartitions == 0 and kept.makespan_s == pytest.approx(1800, rel=0.01)
    # forced modes other than mig never change a layout (nor does the engine under them)
    forced = Simulation(
        trace, policy="mps", station="sim:a100-40gb", mig="0=7g.40gb", mig_repartition=True
    ).run()
    assert forced.repartitions == 0


def test_a_mig_slice_runs_at_its_share(tmp_path: Path) -> None:
    # one heavy job alone on a 1g.5gb slice of an A100 runs far below its whole-GPU speed
    trace = load_trace(write_trace(tmp_path, [{"sm_pct": 70, "exclusive_minutes": 10}]))
    result = Simulation(trace, policy="mig", station="sim:a100-40gb", mig="0=1g.5gb").run()
    assert result.modes == {"mig": 1} and result.makespan_s > 2 * 600


def test_trace_per_job_fields_are_honoured(tmp_path: Path) -> None:
    trace = load_trace(
        write_trace(
            tmp_path, [{"sm_pct": 55, "membw_pct": 40, "model": "BERT"}, {}, {"model": "DLRM"}]
        )
    )
    first, second, third = trace.jobs
    assert (first.sm_pct, first.membw_pct, first.model, first.name) == (55.0, 40.0, "BERT", "BERT")
    assert (second.sm_pct, second.membw_pct) == (10.0, None)  # the light class
    assert third.sm_pct == 5.0  # DLRM's published figure
    sim = Simulation(trace, policy="auto")
    assert sim.runs[0].demand.membw_pct == 40.0 and sim.runs[0].demand.sm_pct == 55.0
    assert job_workload(sim.runs[0], DEFAULT_PARAMS).membw == pytest.approx(0.40)


def test_bad_percentages_are_trace_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="sm_pct: expected a number from 0 to 100, found 150"):
        load_trace(write_trace(tmp_path, [{"sm_pct": 150}]))


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        # an arrival of NaN once turned the replay forever (its clock never reached it)
        ("arrival_s", "NaN", "arrival_s: expected a number from 0 to 315360000, found nan"),
        ("arrival_s", "1e300", "arrival_s: expected a number from 0 to 315360000"),
        ("arrival_s", "-5", "arrival_s: expected a number from 0 to 315360000, found -5"),
        (
            "exclusive_minutes",
            "Infinity",
            "exclusive_minutes: expected a number above 0 to 5256000, found inf",
        ),
        ("exclusive_minutes", "NaN", "exclusive_minutes: expected a number above 0"),
        ("peak_memory_mb", "NaN", "peak_memory_mb: expected a number from 0 to 16777216"),
        # an estimate of Infinity was an OverflowError traceback, NaN "cannot convert float NaN"
        ("estimate_gpumemnet_mb", "Infinity", "estimate_gpumemnet_mb: expected a number from 0"),
        ("estimate_gpumemnet_mb", "NaN", "estimate_gpumemnet_mb: expected a number from 0"),
        (
            "priority",
            "Infinity",
            "priority: expected a whole number from -1000 to 1000, found inf (number)",
        ),
        ("gpus", "0", "gpus: expected a whole number from 1 to 64, found 0"),
        # finite but past what `gpudesk submit` takes: a peak of 1e300 MB was printed as a
        # 300-digit count of GiB ("impossible: job 1 needs 9765625000...0.0 GiB")
        (
            "peak_memory_mb",
            "1e300",
            "peak_memory_mb: expected a number from 0 to 16777216, found 1e+300",
        ),
        (
            "estimate_horus_mb",
            "1e30",
            "estimate_horus_mb: expected a number from 0 to 16777216, found 1e+30",
        ),
        ("gpus", "100000000000000000000", "gpus: expected a whole number from 1 to 64"),
        ("priority", "1e30", "priority: expected a whole number from -1000 to 1000, found"),
        # a repeated id was "error: list.remove(x): x not in list"
        ("id", "1", "id 1 is given twice (jobs[0] has it too)"),
    ],
)
def test_a_number_a_replay_cannot_use_is_a_trace_error(
    tmp_path: Path, field: str, value: str, words: str
) -> None:
    """Python's JSON reads NaN, Infinity and numbers past a float as numbers: each field is
    checked for what a replay can use."""
    path = write_trace(tmp_path, [{}, {field: "SENTINEL"}])
    path.write_text(path.read_text().replace('"SENTINEL"', value))
    shown = "1" if field == "id" else "2"  # the job's id, where it gives one
    with pytest.raises(TraceError, match=re.escape(f"jobs[1] (id {shown}): {words}")):
        load_trace(path)


def test_a_thread_cap_slows_a_job_alone(tmp_path: Path) -> None:
    from gpudesk.policy.policy import Placement

    sim = Simulation(load_trace(write_trace(tmp_path, [{"sm_pct": 30}])), policy="mps")
    run = sim.runs[0]
    sim.queue.add(run)
    sim._start(run, Placement(1, "gpu:0/mps", "mps", "test", gpus=(0,), mps_thread_pct=10))
    assert sim.rate(run) < 0.8
    sim.stop(run)
    sim.queue.add(run)
    sim._start(run, Placement(1, "gpu:0/mps", "mps", "test", gpus=(0,), mps_thread_pct=100))
    assert sim.rate(run) == 1.0


def test_the_measured_estimator_gives_true_peaks_from_history(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path, [{"peak_memory_mb": 12345}]))
    sim = Simulation(trace, policy="auto", estimator="measured")
    demand = sim.runs[0].demand
    assert (demand.memory_mib, demand.source) == (12345, "history")
    assert sim.runs[0].record.spec.memory_gb is None
    with pytest.raises(ValueError, match="unknown estimator"):
        Simulation(trace, policy="auto", estimator="oracle")


@pytest.mark.parametrize(
    "station, peak_mb, gpus",
    [("sim:h100", 60000 * 1.5, 1), ("sim:a100-40gb", 90000, 1), ("sim:h100", 4000, 2)],
)
def test_an_impossible_job_is_reported_not_raised(
    tmp_path: Path, station: str, peak_mb: float, gpus: int
) -> None:
    trace = load_trace(
        write_trace(tmp_path, [{"peak_memory_mb": peak_mb, "gpus": gpus}, {"id": 2}])
    )
    for policy in ("exclusive", "carma", "auto", "mig", "naive", "mps"):
        result = Simulation(trace, policy=policy, station=station).run()
        assert result.impossible == 1 and result.impossible_jobs[0]["id"] == 1
        assert result.lost == 0 and result.makespan_s == pytest.approx(1800, rel=0.5)


def test_a_job_needing_more_whole_gpus_than_the_station_has_whole_is_impossible(
    tmp_path: Path,
) -> None:
    """Two A100s, one in MIG mode as given: a 2-GPU job can never run (multi-GPU jobs take whole
    GPUs, and the engine never takes a GPU out of MIG mode). It is impossible, said why, and the
    other job's figures stand; it used to be "lost" under every policy, with no makespan."""
    trace = load_trace(write_trace(tmp_path, [{"gpus": 2}, {"id": 2}], "a100-40gbx2"))
    for policy in ("exclusive", "carma", "auto", "mig", "naive", "mps"):
        sim = Simulation(trace, policy=policy, station="sim:a100-40gbx2", mig="1=3g.20gb")
        result = sim.run()
        assert (result.impossible, result.lost) == (1, 0), policy
        assert "1 of sim:a100-40gbx2's 2 are whole" in result.impossible_jobs[0]["reason"]
        assert result.makespan_s > 0
    # on the same station with both GPUs whole it runs
    assert Simulation(trace, policy="auto", station="sim:a100-40gbx2").run().impossible == 0


def test_a_60_gb_job_runs_on_an_h100(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path, [{"peak_memory_mb": 60000}]))
    for policy in ("exclusive", "carma", "auto"):
        result = Simulation(trace, policy=policy, station="sim:h100").run()
        assert (result.impossible, result.lost) == (0, 0)


def test_truth_files(tmp_path: Path) -> None:
    def parse_truth(data: object) -> ModelParams:
        return params_from_json(data, "--truth")

    assert parse_truth({"mps_tenant_cost": 0.15}).mps_tenant_cost == 0.15
    assert parse_truth({"mps_tenant_cost": 0.15}).contention == DEFAULT_PARAMS.contention
    with pytest.raises(ValueError, match=r"unknown model parameter.*tenant_cost; known: mps_"):
        parse_truth({"tenant_cost": 0.15})
    with pytest.raises(ValueError, match="non-negative number"):
        parse_truth({"contention": "high"})
    with pytest.raises(ValueError, match="non-negative number"):
        parse_truth({"contention": True})
    with pytest.raises(ValueError, match="expected a JSON object"):
        parse_truth([0.15])
    # what `gpudesk calibrate --json` saved on a real H100 (docs/calibration.md)
    saved = Path(__file__).parents[2] / "bench" / "results" / "calibrate-h100-8s.json"
    assert load_truth(saved).mps_tenant_cost == pytest.approx(0.127, abs=5e-4)
    assert load_truth(saved).contention == pytest.approx(0.085, abs=5e-4)
    path = tmp_path / "truth.json"
    path.write_text('{"naive_switch_cost": 0.2}')
    assert load_truth(path).naive_switch_cost == 0.2
    path.write_text("nope")
    with pytest.raises(ValueError, match="is not JSON"):
        load_truth(path)
    # Python's JSON reads NaN and Infinity: a truth of either once replayed t1 in 30 h
    for word in ("NaN", "Infinity", "1e400"):
        path.write_text(f'{{"mps_tenant_cost": {word}}}')
        with pytest.raises(ValueError, match="mps_tenant_cost must be a non-negative number"):
            load_truth(path)


def test_learning_moves_the_tenant_cost_toward_the_truth() -> None:
    trace = load_trace(Path(__file__).parents[2] / "traces" / "carma-philly-t1.json")
    truth = DEFAULT_PARAMS.with_values({"mps_tenant_cost": 0.15})
    learned = Simulation(trace, policy="auto", truth=truth).run()
    assert learned.observations > 0
    # part of the way only: on t1 most of what is shared is by families that never ran alone,
    # which the engine cannot read (the test below); from them all it came within 0.03
    assert 0.06 < learned.learned_params["mps_tenant_cost"] < 0.15
    frozen = Simulation(trace, policy="auto", truth=truth, learn=False).run()
    assert frozen.observations == 0 and frozen.learned_params["mps_tenant_cost"] == 0.04
    knowing = Simulation(trace, policy="auto", truth=truth, policy_params=truth).run()
    assert knowing.learned_params["mps_tenant_cost"] == pytest.approx(0.15, abs=0.005)


def test_a_family_learns_from_sharing_only_once_it_ran_alone(tmp_path: Path) -> None:
    """The engine reads a stretch beside others only with each tenant's steady SM share
    measured alone (gpudesk.engine.learning); the simulator's learner likewise, by family."""

    def shared_kept(jobs: list[dict[str, Any]]) -> tuple[int, int]:
        sim = Simulation(
            load_trace(write_trace(tmp_path, jobs)), policy="mps", station="sim:a100-40gb"
        )
        sim.run()
        kept = sim.learner.kept(sim.model.name)
        return sum(k.obs.mechanism == "mps" for k in kept), sim.unmeasured_intervals

    a, b = {"model": "a", "sm_pct": 30}, {"model": "b", "sm_pct": 30}
    # two families that only ever share: nothing learned from it
    assert shared_kept([a, b]) == (0, 2)
    # each alone first (0-30 min, 35-65 min), then one of each together: both learn
    later = [{**a, "arrival_s": 4200}, {**b, "arrival_s": 4200}]
    assert shared_kept([a, {**b, "arrival_s": 2100}, *later]) == (2, 0)


def test_a_job_that_died_sharing_is_retried_alone_not_lost_as_too_big(tmp_path: Path) -> None:
    """Hinted at 10 GB, it peaks at 38 GB beside an 8 GB job on a 40 GB A100 and dies; grown
    by the OOM rule its estimate passes the GPU's size. The engine caps the re-estimate at what
    the GPU offers a job alone (attempts.py); the simulator does the same, so it is recovered."""
    trace = load_trace(
        write_trace(
            tmp_path,
            [
                {"peak_memory_mb": 38000, "estimate_gpumemnet_mb": 10000, "class": "heavy"},
                {"id": 2, "peak_memory_mb": 8000, "estimate_gpumemnet_mb": 8000},
            ],
        )
    )
    for policy in ("mps", "auto", "naive"):
        result = Simulation(trace, policy=policy, station="sim:a100-40gb").run()
        assert (result.oom_crashes, result.oom_recovered, result.lost) == (1, 1, 0), policy


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        # int() cut these: 1.9 and 2.5 GPUs ran on 1 and 2, 0.5 was "found 0 (integer)"
        ("gpus", "1.9", "gpus: expected a whole number from 1 to 64, found 1.9 (number)"),
        ("gpus", "2.5", "gpus: expected a whole number from 1 to 64, found 2.5 (number)"),
        ("gpus", "0.5", "gpus: expected a whole number from 1 to 64, found 0.5 (number)"),
        # as a profile refuses gpus = 2.0: a whole number is an integer
        ("gpus", "2.0", "gpus: expected a whole number from 1 to 64, found 2.0 (number)"),
        ("priority", "1.5", "priority: expected a whole number from -1000 to 1000, found 1.5"),
        # booleans were taken as 1
        ("gpus", "true", "gpus: expected a whole number from 1 to 64, found true (boolean)"),
        (
            "arrival_s",
            "true",
            "arrival_s: expected a number from 0 to 315360000, found true (boolean)",
        ),
        # each was "missing or bad field (int() argument must be ..., not 'NoneType')" or alike
        ("priority", "null", "priority: expected a whole number from -1000 to 1000, found null"),
        ("gpus", "null", "gpus: expected a whole number from 1 to 64, found null"),
        ("checkpoint_s", "null", "checkpoint_s: expected a number from 0 to 3600, found null"),
        ("exclusive_minutes", '"ten"', "exclusive_minutes: expected a number above 0 to 5256000"),
        ("estimate_horus_mb", "{}", "estimate_horus_mb: expected a number from 0 to 16777216"),
        ("preemptible", '"yes"', "preemptible: expected true or false, found 'yes' (string)"),
        ("class", "5", "class: expected a string, found 5 (integer)"),
        # an unknown class was taken as 50 % SM, a typo'd field ignored: both without a word
        ("class", '"ultra"', "class: expected one of light, medium, heavy, found 'ultra'"),
        ("class", '"Heavy"', "class: expected one of light, medium, heavy, found 'Heavy'"),
        ("sm_pctt", "90", "'sm_pctt' is not a trace field; did you mean sm_pct?"),
        ("task", "[1]", "task: expected a string, found [1] (array)"),
    ],
)
def test_a_field_of_the_wrong_kind_is_named_with_the_value_as_written(
    tmp_path: Path, field: str, value: str, words: str
) -> None:
    path = write_trace(tmp_path, [{}, {field: "SENTINEL"}])
    path.write_text(path.read_text().replace('"SENTINEL"', value))
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert str(caught.value).startswith(f"{path}: jobs[1] (id 2): {words}")
    assert "\n" not in str(caught.value)


def test_an_unknown_key_of_the_trace_is_said_and_the_readers_own_fields_are_kept(
    tmp_path: Path,
) -> None:
    path = write_trace(tmp_path, [{"dataset": "imagenet", "batch_size": 32, "epochs": 2}])
    assert load_trace(path).jobs[0].sm_pct == 10.0  # its class, light: the rest only kept
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "staton": "h100"}))
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert str(caught.value) == f"{path}: 'staton' is not a trace field; did you mean station?"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        # 2.7 was job 2; [1] was "int() argument must be ..."
        ("2.7", "id: expected a whole number from 1 to 9223372036854775807, found 2.7 (number)"),
        ("[1]", "id: expected a whole number from 1 to 9223372036854775807, found [1] (array)"),
        ("true", "id: expected a whole number from 1 to 9223372036854775807, found true (boolean)"),
    ],
)
def test_a_bad_id_is_named_without_an_id(tmp_path: Path, value: str, words: str) -> None:
    path = write_trace(tmp_path, [{}, {"id": "SENTINEL"}])
    path.write_text(path.read_text().replace('"SENTINEL"', value))
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert str(caught.value) == f"{path}: jobs[1]: {words}"


def test_a_missing_field_says_what_it_is(tmp_path: Path) -> None:
    """It was "jobs[0]: missing or bad field ('exclusive_minutes')"."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"jobs": [{"id": 7, "arrival_s": 0, "peak_memory_mb": 1}]}))
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert str(caught.value) == (
        f"{path}: jobs[0] (id 7): missing exclusive_minutes (the job's run time alone, in minutes)"
    )
    path.write_text(json.dumps({"jobs": [5]}))
    with pytest.raises(TraceError, match=re.escape("jobs[0]: expected an object (a job), found 5")):
        load_trace(path)


def test_null_is_not_given_where_a_field_may_be_left_out(tmp_path: Path) -> None:
    trace = load_trace(
        write_trace(tmp_path, [{"sm_pct": None, "estimate_horus_mb": None, "model": None}])
    )
    job = trace.jobs[0]
    assert (job.sm_pct, job.model, sorted(job.estimates)) == (10.0, "", ["gpumemnet"])


@pytest.mark.parametrize(
    ("top", "words"),
    [
        # these printed "trace None", "trace ['x']" and "found 'sim:5'"
        ({"name": None}, "name: expected a string, found null"),
        ({"name": ["x"]}, "name: expected a string, found ['x'] (array)"),
        ({"station": 5}, "station: expected a simulated station's name: dgx-station-a100"),
        ({"station": "h9"}, "station: expected a simulated station's name: dgx-station-a100"),
    ],
)
def test_a_trace_name_and_station_are_checked(
    tmp_path: Path, top: dict[str, Any], words: str
) -> None:
    path = write_trace(tmp_path, [{}])
    path.write_text(json.dumps({**json.loads(path.read_text()), **top}))
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert str(caught.value).startswith(f"{path}: {words}")
    if "station" in top:
        assert f"found {top['station']!r} (" in str(caught.value)


def test_a_trace_station_with_a_count_is_taken(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path, [{}], station="h100x2"))
    assert trace.sim_station == "sim:h100x2"


def test_an_empty_trace_name_is_said() -> None:
    """`gpudesk simulate ''` said "cannot read the trace .": the empty name became a folder."""
    with pytest.raises(TraceError, match="the trace's name is empty"):
        load_trace("")


def test_jobs_without_the_estimators_guess_are_counted(tmp_path: Path) -> None:
    from gpudesk.policy.trace import estimators_given, missing_estimates

    trace = load_trace(write_trace(tmp_path, [{"estimate_horus_mb": 100}, {}, {}]))
    assert [missing_estimates(trace, e) for e in ESTIMATORS] == [0, 2, 3, 0]
    assert estimators_given(trace) == ("gpumemnet", "horus")
