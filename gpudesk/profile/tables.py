"""The profile's own tables: [station], [report], [tracking], [cluster], [datasets] and
[defaults], each checked key by key.
"""

from __future__ import annotations

import difflib
from typing import Any

from gpudesk.core.cluster import CLUSTER_KEYS, ClusterSpec, check_cluster
from gpudesk.core.datasets import LOADER_KEYS, DatasetSpec
from gpudesk.core.jobs import FIELD_CHECKS, check_dataset, check_name
from gpudesk.core.station import (
    STATION_CHECKS,
    STATION_KEYS,
    StationConfig,
    mig_layout_problem,
)
from gpudesk.core.tracking_spec import TrackingSpec, check_mlflow_uri, resolve_mlflow_uri
from gpudesk.profile.model import DatasetConfig, ReportConfig
from gpudesk.profile.problems import _Recorder
from gpudesk.profile.values import (
    _DEFAULT_HINTS,
    _INVALID,
    _KEY_CHECKS,
    DATASET_KEYS,
    DEFAULT_KEYS,
    REPORT_KEYS,
    TRACKING_KEYS,
    _check_factory,
    _check_goal,
    _check_metric,
)
from gpudesk.toml_lines import Key


class _Tables(_Recorder):
    """Reads the profile's own tables, each into its config (None or empty when broken)."""

    def station(self, document: dict[str, Any]) -> StationConfig:
        if "station" not in document:
            return StationConfig()
        table = self.table(("station",), document["station"], "a [station] table")
        if table is None:
            return StationConfig()
        self.unknown_keys(("station",), table, STATION_KEYS)
        values: dict[str, Any] = {}
        for key, check in STATION_CHECKS.items():
            if key in table:
                checked = self.check(("station", key), check, table[key])
                if checked is not _INVALID:
                    values[key] = checked
        # the layout against the simulated station the same table names (its GPUs, its model)
        problem = mig_layout_problem(values.get("backend", "auto"), values.get("mig"))
        if problem is not None:
            self.problem(("station", "mig"), problem)
            del values["mig"]
        return StationConfig.from_checked(values)

    def report(self, document: dict[str, Any]) -> ReportConfig | None:
        if "report" not in document:
            return None
        table = self.table(("report",), document["report"], "a [report] table")
        if table is None:
            return None
        self.unknown_keys(("report",), table, REPORT_KEYS)
        metric = goal = _INVALID
        if "metric" not in table:
            self.problem(
                ("report", "metric"),
                'missing: name the result metric to rank the jobs by, e.g. metric = "val_acc" '
                "(a key of the `result {json}` line the jobs print; docs/results.md)",
                at=("report",),
            )
        else:
            metric = self.check(("report", "metric"), _check_metric, table["metric"])
        if "goal" not in table:
            shown = metric if isinstance(metric, str) else "the metric"
            self.problem(
                ("report", "goal"),
                f'missing: say goal = "max" if a larger {shown} is better, or goal = "min" '
                "if a smaller one is (an accuracy is maxed, a loss minimized)",
                at=("report",),
            )
        else:
            goal = self.check(("report", "goal"), _check_goal, table["goal"])
        if metric is _INVALID or goal is _INVALID:
            return None
        return ReportConfig(metric, goal)

    def read_tracking(self, document: dict[str, Any], profile_name: str) -> TrackingSpec | None:
        """[tracking]: `mlflow_uri` (a relative sqlite path is anchored at the profile's folder)
        and `experiment` (default: the profile's name)."""
        if "tracking" not in document:
            return None
        table = self.table(("tracking",), document["tracking"], "a [tracking] table")
        if table is None:
            return None
        self.unknown_keys(("tracking",), table, TRACKING_KEYS)
        uri = experiment = _INVALID
        if "mlflow_uri" not in table:
            self.problem(
                ("tracking", "mlflow_uri"),
                'missing: name the MLflow tracking store, e.g. mlflow_uri = "sqlite:///mlflow.db" '
                '(a file beside this profile) or "http://127.0.0.1:5000" (docs/tracking.md)',
                at=("tracking",),
            )
        else:
            raw = table["mlflow_uri"]
            if isinstance(raw, str):
                raw = resolve_mlflow_uri(raw.strip(), str(self.base_dir))
            uri = self.check(("tracking", "mlflow_uri"), check_mlflow_uri, raw)
        experiment = profile_name
        if "experiment" in table:
            experiment = self.check(("tracking", "experiment"), check_name, table["experiment"])
        if uri is _INVALID or experiment is _INVALID:
            return None
        return TrackingSpec(uri, experiment)

    def read_cluster(self, document: dict[str, Any]) -> ClusterSpec | None:
        """[cluster]: the Slurm cluster the profile's jobs go to (gpudesk.core.cluster); each
        key's problem is reported at its own line."""
        if "cluster" not in document:
            return None
        table = self.table(("cluster",), document["cluster"], "a [cluster] table")
        if table is None:
            return None
        self.unknown_keys(("cluster",), table, CLUSTER_KEYS)
        ok = True
        for key in CLUSTER_KEYS:
            if key not in table:
                continue
            try:
                check_cluster({key: table[key]})
            except ValueError as exc:
                ok = False
                self.problem(("cluster", key), str(exc).removeprefix(f"{key}: "))
        if not ok or any(key not in CLUSTER_KEYS for key in table):
            return None
        return check_cluster(table)

    def datasets(self, document: dict[str, Any]) -> dict[str, DatasetConfig]:
        if "datasets" not in document:
            return {}
        expected = "a table of datasets such as [datasets.digits]"
        tables = self.table(("datasets",), document["datasets"], expected)
        if tables is None:
            self.dataset_names = None
            return {}
        result: dict[str, DatasetConfig] = {}
        names: set[str] = set()
        for name, body in tables.items():
            key: Key = ("datasets", name)
            names.add(name)  # even when broken, so references to it don't cascade into errors
            if self.check(key, check_dataset, name) is _INVALID:
                continue
            table = self.table(key, body, f"a [datasets.{name}] table")
            if table is None:
                continue
            self.unknown_keys(key, table, DATASET_KEYS)
            factory = None
            if "factory" in table:
                checked = self.check((*key, "factory"), _check_factory, table["factory"])
                factory = None if checked is _INVALID else checked
            loader = None
            if factory is not None:
                settings = {k: v for k, v in table.items() if k in LOADER_KEYS}
                try:
                    loader = DatasetSpec.from_dict({"name": name, "factory": factory, **settings})
                except ValueError as exc:
                    field_name, _, message = str(exc).partition(": ")
                    self.problem((*key, field_name), message)
            result[name] = DatasetConfig(name, factory, loader)
        self.dataset_names = names
        return result

    def check_dataset_reference(self, key: Key, name: str) -> None:
        known = self.dataset_names
        if known is None or name in known:
            return
        message = f"unknown dataset {name!r}"
        close = difflib.get_close_matches(name, sorted(known), n=1)
        if close:
            message += f"; did you mean {close[0]!r}?"
        else:
            message += f"; define it with a [datasets.{name}] table"
        self.problem(key, message)

    def read_defaults(self, document: dict[str, Any]) -> None:
        if "defaults" not in document:
            return
        table = self.table(("defaults",), document["defaults"], "a [defaults] table")
        if table is None:
            return
        self.unknown_keys(("defaults",), table, DEFAULT_KEYS, _DEFAULT_HINTS)
        for key in DEFAULT_KEYS:
            if key in table:
                check = _KEY_CHECKS.get(key) or FIELD_CHECKS[key]
                self.defaults[key] = self.check(("defaults", key), check, table[key])
        dataset = self.defaults.get("dataset")
        if isinstance(dataset, str):
            self.check_dataset_reference(("defaults", "dataset"), dataset)
