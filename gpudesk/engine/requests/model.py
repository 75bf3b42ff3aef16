"""The interference model's requests: `model_show`, `model_observe` (calibration's observations
fed to the learner) and `model_reset`.
"""

from __future__ import annotations

import logging

from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.wire.model import (
    GpuModelView,
    ModelObserveResult,
    ModelResetResult,
    ModelShowResult,
)
from gpudesk.core.wire.requests import ModelObserveArgs, ModelResetArgs, OpArgs
from gpudesk.engine.requests.common import Handler, Requests
from gpudesk.policy.observation_wire import observation_from_dict
from gpudesk.text import is_text

log = logging.getLogger("gpudesk.engine")


class ModelRequests(Requests):
    """The interference model ops."""

    def ops(self) -> dict[str, Handler]:
        return {
            "model_show": self.model_show,
            "model_observe": self.model_observe,
            "model_reset": self.model_reset,
        }

    def model_show(self, _args: OpArgs, _caller: Caller) -> ModelShowResult:
        """The interference model's parameters for each GPU model on the station (and any
        other the store learned about), then the defaults (gpu_model ""), each with its
        prior, provenance and observations."""
        learning = self.parts.learning
        models = [
            GpuModelView(
                gpu_model=gpu_model,
                gpus=learning.gpus_of(gpu_model),
                params=[p.view() for p in learning.describe(gpu_model)],
            )
            for gpu_model in [m for m in learning.gpu_models() if m]
        ]
        defaults = [p.view() for p in learning.describe("")]
        models.append(GpuModelView(gpu_model="", gpus=[], params=defaults))
        monitor = self.parts.telemetry.monitor
        return ModelShowResult(
            backend=monitor.backend.name,
            simulated=monitor.simulated,
            observe_min_s=learning.min_s,
            commands_with_rate_alone=len(learning.alone),
            models=models,
        )

    def model_observe(self, args: ModelObserveArgs, caller: Caller) -> ModelObserveResult:
        """{"gpu_model": str, "observations": [observation], "source": "calibrated"|"learned"}:
        feed measured observations (`gpudesk calibrate`'s probes) to the learner, stored at
        once. Validated all first: one bad observation fails the request with none kept.
        An admin's only: the model places everyone's jobs."""
        self._need_admin(caller, "feed observations to the interference model")
        gpu_model = args.gpu_model
        if not is_text(gpu_model):
            raise ProtocolError(
                protocol.INVALID_ARGS, "'gpu_model' must name the GPU model in UTF-8 text"
            )
        try:
            observations = [
                observation_from_dict(o, f"observations[{i}]")
                for i, o in enumerate(args.observations)
            ]
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, str(exc)) from None
        learning = self.parts.learning
        moved: dict[str, int] = {}
        for name in learning.observe_many(gpu_model, observations, args.source):
            if name is not None:
                moved[name] = moved.get(name, 0) + 1
        return ModelObserveResult(
            gpu_model=gpu_model,
            accepted=sum(moved.values()),
            ignored=len(observations) - sum(moved.values()),
            moved=moved,
            params=[p.view() for p in learning.describe(gpu_model)],
        )

    def model_reset(self, args: ModelResetArgs, caller: Caller) -> ModelResetResult:
        """{"confirm": true, "gpu_model": str | null}: forget what was learned and calibrated
        for one GPU model (or all): its parameters go back to the defaults. An admin's only."""
        self._need_admin(caller, "reset the interference model")
        gpu_model = args.gpu_model
        if gpu_model is not None and not is_text(gpu_model):
            raise ProtocolError(
                protocol.INVALID_ARGS, "'gpu_model' must be a GPU model's name, or null for all"
            )
        if not args.confirm:
            raise ProtocolError(
                protocol.REFUSED, "resetting the model drops what was learned: send confirm: true"
            )
        known = [m for m in self.parts.learning.gpu_models() if m]
        if gpu_model is not None and gpu_model not in known:
            # a typo would otherwise drop nothing and say it reset the model
            raise ProtocolError(
                protocol.INVALID_ARGS,
                f"no GPU model {gpu_model!r} on this station or in what it learned; "
                f"its models: {', '.join(known) or 'none'} (as `gpudesk model show` prints "
                "them; leave --gpu-model out to reset every one)",
            )
        dropped = self.parts.learning.reset(gpu_model)
        message = f"interference model reset ({gpu_model or 'every GPU model'}): {dropped} dropped"
        log.info(message)
        self.parts.store.add_event("model", message)
        return ModelResetResult(gpu_model=gpu_model, dropped=dropped)
