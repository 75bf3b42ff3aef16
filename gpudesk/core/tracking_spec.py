"""A job's MLflow tracking (`[tracking]`, `--mlflow-uri`): the store's URI, its experiment, the
params logged and a sweep's objective, each checked as every submitted field is (core.jobs)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

import msgspec

from gpudesk.core.field_checks import check_name, describe
from gpudesk.text import is_text, unsafe_char

# MLflow's own limits (mlflow.utils.validation): a param's key and value, a run's params.
MLFLOW_MAX_PARAM_KEY = 250
MLFLOW_MAX_PARAM_VALUE = 6000
MAX_OBJECTIVE_CHARS = 240  # a sweep's roll-up logs "best/<objective>": within MLflow's 250
MAX_TRACKING_PARAMS = 100
MAX_TRACKING_URI = 2000
DEFAULT_EXPERIMENT = "gpudesk"  # a single job's experiment unless --experiment names one

_URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def check_mlflow_uri(value: Any) -> str:
    """An MLflow tracking URI: `scheme:...` (sqlite:////abs/mlflow.db, http://host:5000,
    postgresql://…). A sqlite or file store's path must be absolute: the tracking worker runs
    in `/` (gpudesk.spawn), so a relative one would land there (`resolve_mlflow_uri` anchors
    one from a profile or the command line first)."""
    if not isinstance(value, str):
        raise ValueError(
            "expected an MLflow tracking URI string such as "
            f'"sqlite:////home/you/mlflow.db" or "http://127.0.0.1:5000", found {describe(value)}'
        )
    uri = value.strip()
    if not uri or len(uri) > MAX_TRACKING_URI:
        raise ValueError(f"expected a tracking URI of 1 to {MAX_TRACKING_URI} characters")
    if unsafe_char(uri) is not None or not is_text(uri):
        raise ValueError("a tracking URI cannot contain control characters or non-UTF-8 bytes")
    match = _URI_SCHEME.match(uri)
    if match is None or len(match.group(1)) == 1:  # "C:" is a path, not a scheme
        raise ValueError(
            f"{uri!r} is not a URI: give the store with its scheme, e.g. "
            '"sqlite:////home/you/mlflow.db" (an SQLite file; four slashes for an absolute '
            'path) or "http://127.0.0.1:5000" (an MLflow server)'
        )
    scheme = match.group(1).lower()
    if scheme in ("sqlite", "file"):
        path = uri[len(scheme) + 1 :]
        path = path[2:] if path.startswith("//") else path  # file:///abs, sqlite:////abs
        if scheme == "sqlite":
            path = path[1:] if path.startswith("/") else path
        if not path.startswith("/"):
            raise ValueError(
                f"{uri!r}: the store's path must be absolute (the tracking worker runs in /); "
                "write sqlite:////full/path/mlflow.db (four slashes)"
            )
    return uri


def resolve_mlflow_uri(uri: str, base_dir: str) -> str:
    """A sqlite (or file) store given with a relative path, anchored at `base_dir` (a profile's
    folder, the current one for `gpudesk submit`); any other URI as it is."""
    for scheme in ("sqlite:///", "file://"):
        if uri.startswith(scheme):
            path = uri[len(scheme) :]
            if path and not path.startswith("/"):
                import os.path

                absolute = os.path.normpath(os.path.join(base_dir, os.path.expanduser(path)))
                return scheme + absolute
    if uri.startswith("file:") and not uri.startswith("file:/"):
        import os.path

        return "file://" + os.path.normpath(os.path.join(base_dir, uri[len("file:") :]))
    return uri


def _check_params(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError(f'{what}: expected a table of name = "value", found {describe(value)}')
    if len(value) > MAX_TRACKING_PARAMS:
        raise ValueError(f"{what}: expected at most {MAX_TRACKING_PARAMS}, found {len(value)}")
    params: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key or len(key) > MLFLOW_MAX_PARAM_KEY:
            raise ValueError(f"{what}: a name is 1 to {MLFLOW_MAX_PARAM_KEY} characters")
        if not isinstance(val, str) or len(val) > MLFLOW_MAX_PARAM_VALUE:
            raise ValueError(
                f"{what}.{key}: expected a string of at most {MLFLOW_MAX_PARAM_VALUE} "
                f"characters, found {describe(val)}"
            )
        params[key] = val
    return params


class TrackingSpec(msgspec.Struct, frozen=True):
    """Where a job's MLflow run goes and what it adds to it (docs/tracking.md): one run per job
    in `experiment` of the store at `mlflow_uri`. `params`: the job's own values of its sweep's
    grid, logged as params; `sweep_params`: that grid (each parameter's values), the params of
    the sweep's parent run; `objective` and `goal`: the result metric the parent run rolls its
    best child up by (the profile's [report]; None: the first result metric, maximised)."""

    mlflow_uri: str
    experiment: str = DEFAULT_EXPERIMENT
    params: Mapping[str, str] = msgspec.field(default_factory=dict)
    sweep_params: Mapping[str, str] = msgspec.field(default_factory=dict)
    objective: str | None = None
    goal: str | None = None  # "max" or "min", given with `objective`

    def to_dict(self) -> dict[str, Any]:
        import msgspec  # here, not at the top: `gpudesk top` reads job states and sends no spec

        data = cast("dict[str, Any]", msgspec.to_builtins(self))
        # absent unless given: an engine from before them refuses a key it does not know
        return {k: v for k, v in data.items() if v is not None or k not in ("objective", "goal")}

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> TrackingSpec:
        return cls(
            data["mlflow_uri"],
            data["experiment"],
            dict(data.get("params") or {}),
            dict(data.get("sweep_params") or {}),
            data.get("objective"),
            data.get("goal"),
        )


TRACKING_KEYS = ("mlflow_uri", "experiment", "params", "sweep_params", "objective", "goal")


def _check_objective(value: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A tracking table's `objective` (a result metric's name, as MLflow may name a metric)
    and `goal` ("max" or "min"): both or neither."""
    objective, goal = value.get("objective"), value.get("goal")
    if objective is None and goal is None:
        return None, None
    if not isinstance(objective, str) or not 1 <= len(objective) <= MAX_OBJECTIVE_CHARS:
        raise ValueError(
            f"objective: expected a result metric's name of 1 to {MAX_OBJECTIVE_CHARS} "
            f"characters (with goal), found {describe(objective)}"
        )
    if goal not in ("max", "min"):
        raise ValueError(f'goal: expected "max" or "min" (with objective), found {describe(goal)}')
    return objective, goal


def check_tracking(value: Any) -> TrackingSpec:
    """A job's `tracking` table: `mlflow_uri` (required), `experiment`, `params`,
    `sweep_params`, `objective` and `goal`."""
    if isinstance(value, TrackingSpec):
        value = value.to_dict()
    if not isinstance(value, Mapping):
        raise ValueError(
            f'expected a table such as {{mlflow_uri = "sqlite:////home/you/mlflow.db"}}, '
            f"found {describe(value)}"
        )
    unknown = sorted(str(k) for k in value if k not in TRACKING_KEYS)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown key (known: {', '.join(TRACKING_KEYS)})")
    if value.get("mlflow_uri") is None:
        raise ValueError("mlflow_uri: missing: name the MLflow tracking store")
    try:
        uri = check_mlflow_uri(value["mlflow_uri"])
    except ValueError as exc:
        raise ValueError(f"mlflow_uri: {exc}") from None
    experiment = DEFAULT_EXPERIMENT
    if value.get("experiment") is not None:
        try:
            experiment = check_name(value["experiment"])
        except ValueError as exc:
            raise ValueError(f"experiment: {exc}") from None
    return TrackingSpec(
        uri,
        experiment,
        _check_params(value.get("params") or {}, "params"),
        _check_params(value.get("sweep_params") or {}, "sweep_params"),
        *_check_objective(value),
    )
