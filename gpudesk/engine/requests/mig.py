"""MIG requests: `mig_plan` (the layouts the queue would want) and `mig_apply` (an admin's new
layout for an idle MIG-mode GPU); MIG's errors mapped to protocol codes.
"""

from __future__ import annotations

from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.mig_layout import LayoutError, MigError, MigUsageError
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.wire.mig import MigApplyResult, MigPlanResult
from gpudesk.core.wire.requests import MigApplyArgs, MigPlanArgs
from gpudesk.engine.offloop import Later
from gpudesk.engine.requests.common import Handler, Requests
from gpudesk.engine.station.repartition.control import PlanAndPredictions
from gpudesk.engine.station.repartition.station import MigApplyRefused

# Assumption: replaying a queue of thousands under every plan of 8 GPUs takes seconds, not
# minutes; past this a plan request is answered "took longer" rather than hold a worker.
PLAN_BOUND_S = 60.0


class MigRequests(Requests):
    """The MIG ops (the work is `engine/station/repartition/control.py`'s)."""

    def ops(self) -> dict[str, Handler]:
        return {
            "mig_plan": self.mig_plan,
            "mig_apply": self.mig_apply,
        }

    def mig_plan(self, args: MigPlanArgs, _caller: Caller) -> Later[list[PlanAndPredictions]]:
        """{"gpu": int | null}: the MIG plan of one or every MIG-capable GPU (MigPlan.view):
        the layout the queue would want, the job each slice is for, the nvidia-smi commands
        applying it would run, whether the engine may apply it, or why not, in "auto" what
        auto's own repartitioning predicts of it now (null where it would not weigh it), and in
        "queue_time" the queue's drain time with the layout against the whole GPU (SIMULATED;
        null where there is nothing to weigh)."""
        try:
            replay = self.parts.mig.plans(args.gpu)
        except MigError as exc:
            raise _mig_protocol_error(exc) from None
        simulated = self.parts.telemetry.monitor.simulated

        def reply(plans: list[PlanAndPredictions]) -> MigPlanResult:
            return MigPlanResult(
                plans=[plan.view(auto, queue_time) for plan, auto, queue_time in plans],
                simulated=simulated,
            )

        # The queue's replays off the loop: every other client is answered meanwhile.
        return Later(replay, reply, PLAN_BOUND_S, "predicting the queue under each MIG plan")

    def mig_apply(self, args: MigApplyArgs, caller: Caller) -> MigApplyResult:
        """{"gpu": int, "profiles": [str, ...], "confirm": true}: give an idle MIG-mode GPU this
        layout, destroying its instances, only where [station] mig_repartition allows it and
        only with confirm. A simulated station's `mig` table changes (telemetry and placement
        see the new slices); a real GPU is repartitioned through nvidia-smi. The queue is not
        touched. Never enables MIG mode or resets a GPU. An admin's only."""
        self._need_admin(caller, "apply MIG layouts")
        try:
            return self.parts.mig.apply(args.gpu, args.profiles, args.confirm).view()
        except MigError as exc:
            raise _mig_protocol_error(exc) from None


def _mig_protocol_error(exc: MigError) -> ProtocolError:
    """Refused (config, MIG mode, a busy GPU, not confirmed), a bad request (no such GPU, a
    layout that does not fit), or nvidia-smi failing: each its own code, with MigError's
    one-paragraph message."""
    if isinstance(exc, MigApplyRefused):
        return ProtocolError(protocol.REFUSED, str(exc))
    if isinstance(exc, (MigUsageError, LayoutError)):
        return ProtocolError(protocol.INVALID_ARGS, str(exc))
    return ProtocolError(protocol.MIG_FAILED, str(exc))
