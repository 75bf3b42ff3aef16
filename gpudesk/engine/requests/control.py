"""`suspend`, `resume` and `signal` (a running job's processes stopped, continued or signalled:
the job's backend's work, `backends/local/suspension.py` or Slurm's), each job's owner or an
admin's, job by job as `cancel`; `drain` and `undrain` (`engine/drain.py`), an admin's."""

from __future__ import annotations

from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.job_signals import job_signal
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.wire.control import DrainResult
from gpudesk.core.wire.jobs import ActionResult
from gpudesk.core.wire.requests import DrainArgs, JobRefsArgs, OpArgs, SignalArgs
from gpudesk.engine.offloop import NextTurn
from gpudesk.engine.requests.common import Handler, named
from gpudesk.engine.requests.job_actions import JobActionRequests
from gpudesk.text import printable, safe_text


class ControlRequests(JobActionRequests):
    def ops(self) -> dict[str, Handler]:
        return {
            "suspend": named(self.suspend),
            "resume": named(self.resume),
            "signal": named(self.signal),
            "drain": named(self.drain),
            "undrain": named(self.undrain),
        }

    def suspend(self, args: JobRefsArgs, caller: Caller) -> ActionResult | NextTurn:
        control, by = self.parts.control, caller.name  # named once (`named`), not per job
        return self.act_on_jobs(args, caller, "suspend", lambda job: control.suspend(job, by))

    def resume(self, args: JobRefsArgs, caller: Caller) -> ActionResult | NextTurn:
        control, by = self.parts.control, caller.name
        return self.act_on_jobs(args, caller, "resume", lambda job: control.resume(job, by))

    def signal(self, args: SignalArgs, caller: Caller) -> ActionResult | NextTurn:
        try:
            name = job_signal(args.signal)
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, f"'signal': {exc}") from None
        control, by = self.parts.control, caller.name
        return self.act_on_jobs(args, caller, "signal", lambda job: control.signal(job, name, by))

    def drain(self, args: DrainArgs, caller: Caller) -> DrainResult:
        self._need_admin(caller, "drain the station")
        # shown on every member's terminal: its control characters spelled out
        reason = printable(safe_text(args.reason)).strip() if args.reason else None
        drain = self.parts.scheduler.drain
        changed = drain.drain(caller, reason or None)
        return DrainResult(drain=drain.state, changed=changed)

    def undrain(self, args: OpArgs, caller: Caller) -> DrainResult:
        self._need_admin(caller, "undrain the station")
        ended = self.parts.scheduler.drain.undrain(caller)
        if ended is not None:
            self.parts.due.mark()
        return DrainResult(changed=ended is not None, ended=ended)
