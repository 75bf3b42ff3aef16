"""Who may do what: the engine's roles.

Root and the user the engine runs as are admins. A system engine names an admin group (default
`gpudesk-admin`): its members, as the kernel reports a caller's groups, are admins too. Everyone
else is a user: they act only on their own jobs (a job's owner is the uid that submitted it) and
may not change what belongs to the whole station (its settings, MIG layouts, the interference
model, registered datasets, stopping the engine). A personal engine has no admin group, and
every caller is its own user, so every caller is an admin there, as before.

Every refusal is one sentence that names the rule, so the person refused knows whom to ask.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from gpudesk.core.identity import Caller, user_name
from gpudesk.core.known_owner import group_name
from gpudesk.core.records import JobRecord


@dataclass(frozen=True)
class Access:
    """The engine's roles: its own uid and, on a system engine, its admin group's gid."""

    engine_uid: int
    admin_group: int | None = None

    @classmethod
    def personal(cls) -> Access:
        """A personal engine's: only this process's user (and root) are admins."""
        return cls(os.getuid()).named()

    @classmethod
    def with_admin_group(cls, gid: int) -> Access:
        """A system engine's: this process's user, root and the members of `gid`."""
        return cls(os.getuid(), gid).named()

    def named(self) -> Access:
        """This, its admins named now, at the engine's start: every member's submit, and a
        priority refusal once a job, says who they are, and the user database (LDAP, SSSD) may
        take seconds a name; the engine's loop waits on it for no one (`admins`, `admin_role`
        are each looked up once; a group renamed since is said by its old name)."""
        _ = self.admins, self.admin_role  # cached_property, each: looked up here, once
        return self

    def is_admin(self, caller: Caller) -> bool:
        if caller.uid in (0, self.engine_uid):
            return True
        return self.admin_group is not None and caller.identity.in_group(self.admin_group)

    @cached_property
    def admins(self) -> str:
        """Who the admins are, for a refusal: "a member of gpudesk-admin"."""
        if self.admin_group is not None:
            return f"a member of {group_name(self.admin_group)}"
        if self.engine_uid == 0:
            return "root"
        return f"root or {user_name(self.engine_uid)} (the engine's user)"

    @cached_property
    def admin_role(self) -> str:
        """The admin role in a few words: "an admin (gpudesk-admin)"."""
        if self.admin_group is not None:
            return f"an admin ({group_name(self.admin_group)})"
        return f"an admin ({self.admins})"

    def may_act_on(self, caller: Caller, job: JobRecord) -> bool:
        return job.owner.uid == caller.uid or self.is_admin(caller)

    def job_refusal(
        self, caller: Caller, job: JobRecord, doing: str, *, outcome: bool = False
    ) -> str | None:
        """Why `caller` may not do `doing` ("cancel it", "see its environment") to `job`, or
        None when they may. A request's error names the job ("refused: job 12 belongs to
        ada, …"); an `outcome` of a job-control request (cancel, hold, …) is said after the
        job's id and name (`job 12 (x): refused: it belongs to ada, …`), so it does not name
        it again."""
        if self.may_act_on(caller, job):
            return None
        subject = "it" if outcome else f"job {job.id}"
        return (
            f"refused: {subject} belongs to {job.user}, and only its owner or "
            f"{self.admins} may {doing}"
        )

    def actable_owner(self, caller: Caller, owner: int | None, actable: bool) -> int | None:
        """Whose jobs a listing holds (a uid, or None: anyone's) where `owner` was asked for
        and, with `actable`, only jobs the caller may act on (`gpudesk cancel --name`'s picks):
        without an owner, a member's own, every other being refused her job by job; an
        admin's, anyone's (gpudesk/cli/job_picks.py says why)."""
        if actable and owner is None and not self.is_admin(caller):
            return caller.uid
        return owner

    def admin_refusal(self, caller: Caller, what: str) -> str | None:
        """Why `caller` may not do `what` ("apply MIG layouts"), a station-wide action, or None
        when they may."""
        if self.is_admin(caller):
            return None
        return f"refused: only {self.admins} may {what}"
