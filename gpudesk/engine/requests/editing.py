"""`edit`: a job not started given new fields (pueue's `edit`, Slurm's `scontrol update`), by its
owner or an admin; built and checked by `core/job_edit.py` and `JobSpec.from_dict`, its `after`
jobs and the station's size as `submit` checks them. It keeps its id and place."""

from __future__ import annotations

from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.job_edit import (
    DEPENDENCY_FIELDS,
    dependency_cycle,
    edit_refusal,
    job_edit,
    others_code_refusal,
    tracked_refusal,
)
from gpudesk.core.jobs import SpecError
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.wire.jobs import EditResult
from gpudesk.core.wire.requests import EditArgs
from gpudesk.engine.dependencies import jobs_by_id
from gpudesk.engine.requests.common import Handler, Requests
from gpudesk.engine.requests.submission import check_after_known


class EditRequests(Requests):
    def ops(self) -> dict[str, Handler]:
        return {"edit": self.edit}

    def edit(self, args: EditArgs, caller: Caller) -> EditResult:
        """`refused` for another's job (unless an admin asks), a started or tracked one;
        `invalid_args` naming the field at fault; `unknown_job`. All before anything changes."""
        job = self._find(args.job, "job", caller)
        refusal = self.parts.access.job_refusal(caller, job, "edit it") or self._ended(job.id)
        refusal = (
            refusal
            or edit_refusal(job)
            or others_code_refusal(job, caller.uid, args.fields, args.set_env, args.unset_env)
        )
        if refusal:
            raise ProtocolError(protocol.REFUSED, refusal)
        if job.spec.tracking is not None and self.parts.tracking.run_made(job):
            raise ProtocolError(protocol.REFUSED, tracked_refusal(job))
        store, tasks_of = self.parts.store, self._tasks_of(args.first_tasks_alone)
        env, fields = store.base_env(job.id), args.fields
        try:
            edit = job_edit(job.spec, env, fields, args.set_env, args.unset_env, tasks_of)
        except SpecError as exc:
            where = {"env": "set_env", "unset_env": "unset_env"}.get(exc.key, f"fields.{exc.key}")
            raise ProtocolError(protocol.INVALID_ARGS, f"{where}: {exc.message}") from None
        for key in DEPENDENCY_FIELDS:
            if getattr(edit.spec, key) != getattr(job.spec, key):
                check_after_known(store, getattr(edit.spec, key), f"fields.{key}")
                cycle = dependency_cycle(
                    job.id, getattr(edit.spec, key), lambda ids: jobs_by_id(store, ids).values()
                )
                if cycle:
                    raise ProtocolError(protocol.INVALID_ARGS, f"fields.{key}: {cycle}")
        self.parts.control.backends.for_spec(edit.spec).admit(
            [edit.spec], "the job was left as it was"
        )
        outcome = self.parts.control.backends.for_job(job).edit(job, edit)
        if not outcome.ok:
            raise ProtocolError(protocol.REFUSED, outcome.message)
        return EditResult(id=job.id, name=edit.spec.name, changes=list(edit.changes))
