"""gpudesk's client library: the typed `Client` and the models of everything the engine says.

Every front end — the CLI, `gpudesk top`, the run report, the desk — and any user script drives
the engine through this package:

    from gpudesk.api import Client, JobSpec

    with Client.connect() as client:
        ids = client.submit([JobSpec(name="probe", command=("nvidia-smi",), gpus=1)])
        print(client.show(ids[0]).job.state)
"""

from gpudesk.api.client import BAD_REPLY, Client, Event, EventStream
from gpudesk.api.models import *  # noqa: F403 (every model, listed in models.__all__)
from gpudesk.api.models import __all__ as _models
from gpudesk.engine.jobs import JobSpec
from gpudesk.engine.protocol import EngineError

__all__ = ["BAD_REPLY", "Client", "EngineError", "Event", "EventStream", "JobSpec", *_models]
