"""How the engine reads a job reference a request names (an id, an array's task, a name) before
looking it up: what the wire may carry is checked here, what it names is the engine's store's."""

from __future__ import annotations

from gpudesk.core import protocol
from gpudesk.core.field_checks import array_task_ref, reads_as_job_id, task_range_refusal
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.wire.requests import MAX_ROW_ID, JobRef
from gpudesk.text import is_text, quoted


def checked_ref(ref: JobRef, field: str) -> int | str | tuple[int, int]:
    """`ref` as a job id, array task (`144_2`: (144, 2)) or name, or ProtocolError naming
    `field` for one that is none: empty, an id out of range, a task range, not UTF-8 text."""
    if ref == "":
        raise ProtocolError(
            protocol.INVALID_ARGS, f"'{field}': a job is named by its id or its name"
        )
    if isinstance(ref, str) and (refusal := task_range_refusal(ref)):
        raise ProtocolError(protocol.INVALID_ARGS, f"'{field}': {refusal}")
    if isinstance(ref, str) and (task := array_task_ref(ref)):
        return task  # `144_2`: one task of an array, looked up as it is (`0_2`: no job)
    if isinstance(ref, str) and reads_as_job_id(ref):  # "12", not "²"
        ref = int(ref) if len(ref) <= 19 else MAX_ROW_ID + 1  # int() stops at 4300 digits
    if isinstance(ref, int) and not -MAX_ROW_ID <= ref <= MAX_ROW_ID:
        raise ProtocolError(protocol.INVALID_ARGS, f"'{field}': a job id is at most {MAX_ROW_ID}")
    if isinstance(ref, str) and not is_text(ref):
        raise ProtocolError(
            protocol.INVALID_ARGS,
            f"'{field}': a job name is UTF-8 text; {quoted(ref)} holds bytes that are not",
        )
    return ref
