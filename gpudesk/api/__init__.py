"""gpudesk's client library: the typed `Client` and the models of everything the engine says.

Every front end — the CLI, `gpudesk top`, the run report, the desk — and any user script drives
the engine through this package:

    from gpudesk.api import Client, JobSpec

    with Client.connect() as client:
        ids = client.submit([JobSpec(name="probe", command=("nvidia-smi",), gpus=1)])
        print(client.show(ids[0]).job.state)

The names are loaded when first used (PEP 562): importing `gpudesk.api.errors` or
`gpudesk.api.connection` — what `gpudesk --help` and `gpudesk top` without an engine need — does
not load msgspec or the models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gpudesk.api.errors import BAD_REPLY as BAD_REPLY
from gpudesk.api.errors import EngineError as EngineError

if TYPE_CHECKING:
    from gpudesk.api.client import Client as Client
    from gpudesk.api.client import Event as Event
    from gpudesk.api.client import EventStream as EventStream
    from gpudesk.api.models import *  # noqa: F403 (every model, listed in models.__all__)
    from gpudesk.core.jobs import JobSpec as JobSpec
    from gpudesk.core.jobs import SpecError as SpecError
    from gpudesk.core.tracking_spec import TrackingSpec as TrackingSpec

_LAZY = {
    "Client": "gpudesk.api.client",
    "Event": "gpudesk.api.client",
    "EventStream": "gpudesk.api.client",
    "JobSpec": "gpudesk.core.jobs",
    "SpecError": "gpudesk.core.jobs",
    "TrackingSpec": "gpudesk.core.jobs",
}
_EAGER = ["BAD_REPLY", "EngineError"]


def _model_names() -> list[str]:
    from gpudesk.api import models

    return list(models.__all__)


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return sorted([*_EAGER, *_LAZY, *_model_names()])
    module = _LAZY.get(name)
    # models are CamelCase (and `to_builtins`); a lowercase name is a submodule being imported
    if module is None and (name[:1].isupper() or name == "to_builtins") and name in _model_names():
        module = "gpudesk.api.models"
    if module is None:
        raise AttributeError(f"module 'gpudesk.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_model_names()})
