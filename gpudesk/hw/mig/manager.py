"""MigManager: drives `nvidia-smi` for MIG (read, apply, clear), with a timeout on every call and
the state a failure left the GPU in named in its error."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence

import msgspec

from gpudesk.core.mig_layout import MigError, UnknownGpuError, plan_layout, split_profiles
from gpudesk.core.mig_profiles import SliceSpan
from gpudesk.core.mig_records import (
    ComputeInstance,
    GiProfile,
    GpuEntry,
    GpuInstance,
    MigLayout,
    MigMode,
    MigSlot,
    PlannedInstance,
)
from gpudesk.hw.mig.nvidia_smi import (
    DEFAULT_TIMEOUT,
    EMPTY_CI,
    EMPTY_GI,
    ENV_NVIDIA_SMI,
    SUCCESS_LINE,
    NvidiaSmiError,
    NvidiaSmiTimeout,
    classify_output,
    enable_hint,
    map_nvidia_smi_error,
    match_slots,
    mig_mode_message,
    parse_compute_instances,
    parse_gi_placements,
    parse_gi_profiles,
    parse_gpu_instances,
    parse_list_gpus,
)


class _Step(msgspec.Struct):
    argv: list[str]
    what: str  # for messages: "destroy the compute instances"


def _describe(steps: Sequence[_Step]) -> str:
    return "; ".join(f"{s.what} (`{shlex.join(s.argv)}`)" for s in steps)


class MigManager:
    """Drives `nvidia-smi` for MIG. The executable: the argument, else GPUDESK_NVIDIA_SMI, else
    `nvidia-smi` on PATH. Every call has a timeout and captures its output."""

    def __init__(self, nvidia_smi: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.from_env = not nvidia_smi and bool(os.environ.get(ENV_NVIDIA_SMI))
        self.nvidia_smi = nvidia_smi or os.environ.get(ENV_NVIDIA_SMI) or shutil.which("nvidia-smi")
        self.timeout = timeout

    # ------------------------------------------------------------------ running nvidia-smi
    def argv(self, *args: str) -> list[str]:
        if not self.nvidia_smi:
            raise MigError(
                "nvidia-smi was not found on PATH. Install the NVIDIA driver (it ships "
                f"nvidia-smi), or set {ENV_NVIDIA_SMI} to the nvidia-smi executable."
            )
        return [self.nvidia_smi, *args]

    def _run(
        self,
        args: Sequence[str],
        *,
        gpu: int | None = None,
        empty: Sequence[str] = (),
        profile_names: Mapping[str, str] | None = None,
    ) -> str:
        argv = self.argv(*args)
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise NvidiaSmiTimeout(
                f"`{shlex.join(argv)}` did not finish within "
                f"{self.timeout:g} s; the driver may be busy or hung (check "
                f"`nvidia-smi` by hand)."
            ) from None
        except OSError as exc:
            source = f" (from {ENV_NVIDIA_SMI})" if self.from_env else ""
            raise MigError(
                f"cannot run nvidia-smi at {argv[0]}{source}: "
                f"{exc.strerror or exc}. Install the NVIDIA driver, or set "
                f"{ENV_NVIDIA_SMI} to the nvidia-smi executable."
            ) from None
        output = proc.stdout + (("\n" + proc.stderr) if proc.stderr.strip() else "")
        if any(output.strip().startswith(e) for e in empty):
            return output  # "No GPU instances found": the parsers read it as an empty list
        # Listing commands answer these with exit 0 (`-lgi`, `-lci` on an H200 with MIG off,
        # driver 580.159.04): still an error.
        if proc.returncode != 0 or classify_output(output.strip()[:200]) in (
            "mig-disabled",
            "no-gpu",
        ):
            error = map_nvidia_smi_error(argv, proc.returncode, output, gpu, profile_names)
            if error.kind == "mig-disabled" and gpu is not None:
                raise self._mode_error(gpu, error)
            if error.kind == "no-gpu" and gpu is not None:
                raise self._unknown_gpu(gpu)
            raise error
        return proc.stdout

    def _mode_error(self, gpu: int, error: NvidiaSmiError) -> MigError:
        """ "No MIG-enabled devices found" for GPU `gpu`: say why (off, pending, unsupported)."""
        modes = self.mig_modes()
        mode = modes.get(gpu)
        if modes and mode is None:
            return self._unknown_gpu(gpu)
        return self._not_in_mig_mode(gpu, mode, error.argv, error.returncode, error.output)

    def _not_in_mig_mode(
        self, gpu: int, mode: MigMode | None, argv: Sequence[str], returncode: int, output: str
    ) -> NvidiaSmiError:
        """GPU `gpu` is not in MIG mode (`mode`: as the driver reported it, if it did)."""
        state = mode.state if mode else "disabled"
        name = ""
        if state == "unsupported":
            name = next((g.name for g in self._gpus_quietly() if g.index == gpu), "")
        kind = {"pending": "mig-pending", "unsupported": "mig-unsupported"}.get(
            state, "mig-disabled"
        )
        return NvidiaSmiError(mig_mode_message(gpu, mode, name), kind, argv, returncode, output)

    def _unknown_gpu(self, gpu: int) -> UnknownGpuError:
        known = ", ".join(str(g.index) for g in self._gpus_quietly()) or "none"
        return UnknownGpuError(f"there is no GPU {gpu}: nvidia-smi -L lists GPU(s) {known}.")

    def _gpus_quietly(self) -> list[GpuEntry]:
        try:
            return self.gpus()
        except MigError:
            return []

    # -------------------------------------------------------------------------- queries
    def gpus(self) -> list[GpuEntry]:
        """Every GPU and the MIG devices under it (`nvidia-smi -L`)."""
        return parse_list_gpus(self._run(["-L"]))

    def gpu(self, index: int) -> GpuEntry:
        gpus = self.gpus()
        for entry in gpus:
            if entry.index == index:
                return entry
        known = ", ".join(str(g.index) for g in gpus) or "none"
        raise UnknownGpuError(f"there is no GPU {index}: nvidia-smi -L lists GPU(s) {known}.")

    def mig_modes(self) -> dict[int, MigMode]:
        """Current and pending MIG mode per GPU index; empty if this driver cannot say."""
        try:
            text = self._run(
                ["--query-gpu=index,mig.mode.current,mig.mode.pending", "--format=csv,noheader"]
            )
        except MigError:
            return {}
        modes = {}
        for line in text.splitlines():
            parts = [p.strip().strip("[]").lower() for p in line.split(",")]
            if len(parts) == 3 and parts[0].isdigit():
                modes[int(parts[0])] = MigMode(parts[1], parts[2])
        return modes

    def profiles(self, gpu: int, modes: Mapping[int, MigMode] | None = None) -> list[GiProfile]:
        """The GPU instance profiles a GPU in MIG mode offers now (`-lgip`). A GPU not in MIG
        mode raises the mode error: the driver lists profiles in any mode (an H200 with MIG
        disabled answers `-lgip` with its full table and exit 0, driver 580.159.04), but none
        can be created until MIG is on. `modes`: what `mig_modes()` said, when the caller read
        it already (one nvidia-smi less per GPU); read here when None."""
        mode = (self.mig_modes() if modes is None else modes).get(gpu)
        argv = ["mig", "-i", str(gpu), "-lgip"]
        if mode is not None and mode.state != "enabled":
            raise self._not_in_mig_mode(gpu, mode, self.argv(*argv), 0, "")
        return [p for p in parse_gi_profiles(self._run(argv, gpu=gpu)) if p.gpu == gpu]

    def placements(self, gpu: int) -> dict[int, tuple[SliceSpan, ...]]:
        """Possible placements per profile ID (`-lgipp`); empty when the driver lacks `-lgipp`,
        in which case planning derives them from `-lgip`."""
        try:
            text = self._run(["mig", "-i", str(gpu), "-lgipp"], gpu=gpu)
        except NvidiaSmiError as exc:
            if exc.kind == "invalid":
                return {}
            raise
        return {p.profile_id: p.placements for p in parse_gi_placements(text) if p.gpu == gpu}

    def instances(self, gpu: int) -> list[GpuInstance]:
        text = self._run(["mig", "-i", str(gpu), "-lgi"], gpu=gpu, empty=(EMPTY_GI,))
        return [i for i in parse_gpu_instances(text) if i.gpu == gpu]

    def compute_instances(self, gpu: int) -> list[ComputeInstance]:
        text = self._run(["mig", "-i", str(gpu), "-lci"], gpu=gpu, empty=(EMPTY_CI,))
        return [i for i in parse_compute_instances(text) if i.gpu == gpu]

    def slots(self, gpu: int, entry: GpuEntry | None = None) -> list[MigSlot]:
        """The GPU's MIG devices with their UUIDs, matched to their GPU and compute instances."""
        return list(self.layout(gpu, entry).slots)

    def layout(self, gpu: int, entry: GpuEntry | None = None) -> MigLayout:
        """The GPU's instances and MIG devices (`entry`: its `-L` record, if already read)."""
        entry = entry or self.gpu(gpu)
        gis = self.instances(gpu)
        cis = self.compute_instances(gpu)
        return MigLayout(tuple(gis), tuple(cis), tuple(match_slots(entry, gis, cis)))

    # ------------------------------------------------------------------------- changes
    def _clear_steps(self, gpu: int) -> list[_Step]:
        has_cis = bool(self.compute_instances(gpu))
        # compute instances live in GPU instances: with some, there are GPU instances too
        return self._clear_steps_for(gpu, has_cis or bool(self.instances(gpu)), has_cis)

    def _clear_steps_for(
        self, gpu: int, gpu_instances: bool, compute_instances: bool
    ) -> list[_Step]:
        steps = []
        if compute_instances:
            steps.append(
                _Step(self.argv("mig", "-i", str(gpu), "-dci"), "destroy the compute instances")
            )
        if gpu_instances or compute_instances:
            steps.append(
                _Step(self.argv("mig", "-i", str(gpu), "-dgi"), "destroy the GPU instances")
            )
        return steps

    def _create_step(self, gpu: int, plan: Sequence[PlannedInstance]) -> _Step:
        ids = ",".join(str(p.profile.id) for p in plan)
        return _Step(
            self.argv("mig", "-i", str(gpu), "-cgi", ids, "-C"),
            f"create {', '.join(p.profile.short_name for p in plan)}",
        )

    def _apply_steps(
        self, gpu: int, profiles: Sequence[str] | str
    ) -> tuple[list[_Step], list[PlannedInstance], dict[str, str]]:
        names = split_profiles(profiles)
        available = self.profiles(gpu)  # an unknown GPU or MIG mode off stops here
        plan = plan_layout(available, names, self.placements(gpu))
        steps = [*self._clear_steps(gpu), self._create_step(gpu, plan)]
        return steps, plan, {str(p.id): p.short_name for p in available}

    def plan_apply(self, gpu: int, profiles: Sequence[str] | str) -> list[list[str]]:
        """The exact commands `apply` would run (reads the GPU's state, changes nothing)."""
        return [s.argv for s in self._apply_steps(gpu, profiles)[0]]

    def plan_apply_to(
        self,
        gpu: int,
        profiles: Sequence[str] | str,
        available: Sequence[GiProfile],
        placements: Mapping[int, Sequence[SliceSpan]],
        *,
        gpu_instances: bool,
        compute_instances: bool,
    ) -> list[list[str]]:
        """The commands `apply` would run on a GPU in the given state (its `-lgip` profiles,
        `-lgipp` placements, whether it has GPU and compute instances), without asking
        nvidia-smi: for state read already, or a simulated GPU. Raises like `plan_layout`."""
        plan = plan_layout(available, split_profiles(profiles), placements)
        steps = [
            *self._clear_steps_for(gpu, gpu_instances, compute_instances),
            self._create_step(gpu, plan),
        ]
        return [s.argv for s in steps]

    def verify_argv(self) -> list[str]:
        """The listing `apply` reads back to check the MIG devices it made."""
        return self.argv("-L")

    def enable_hint(self, gpu: int) -> str:
        """What the user must run to turn MIG mode on (gpudesk never does)."""
        return enable_hint(gpu)

    def mode_message(self, gpu: int, mode: MigMode) -> str:
        """Why `gpu` cannot be partitioned in this MIG mode, and what the user must run."""
        return mig_mode_message(gpu, mode)

    def apply(self, gpu: int, profiles: Sequence[str] | str) -> list[MigSlot]:
        """Replace the GPU's MIG layout with `profiles`: destroy its compute and GPU instances,
        create the new ones (each with a full compute instance), then return the MIG devices
        that `nvidia-smi -L` shows. A GPU in use is refused by nvidia-smi itself."""
        steps, plan, names = self._apply_steps(gpu, profiles)
        self._execute(gpu, steps, names)
        slots = self.slots(gpu)
        wanted = Counter(p.profile.short_name for p in plan)
        got = Counter(s.profile for s in slots)
        if wanted != got:
            shown = ", ".join(sorted(got.elements())) or "none"
            raise MigError(
                f"nvidia-smi reported success, but GPU {gpu} now shows MIG devices "
                f"{shown} instead of {', '.join(sorted(wanted.elements()))}. Run "
                f"`gpudesk mig list` to see its state."
            )
        return slots

    def plan_clear(self, gpu: int) -> list[list[str]]:
        """The exact commands `clear` would run (none when the GPU has no instances)."""
        return [s.argv for s in self._clear_steps(gpu)]

    def clear(self, gpu: int) -> list[list[str]]:
        """Destroy every compute and GPU instance on the GPU (MIG mode stays on); returns the
        commands it ran (none when the GPU had no instances)."""
        steps = self._clear_steps(gpu)
        self._execute(gpu, steps, {})
        return [s.argv for s in steps]

    def _execute(self, gpu: int, steps: Sequence[_Step], names: Mapping[str, str]) -> None:
        for n, step in enumerate(steps):
            try:
                self._run(step.argv[1:], gpu=gpu, profile_names=names)
            except MigError as exc:
                raise _with_state(exc, gpu, steps[:n], step) from None


def _with_state(exc: MigError, gpu: int, done: Sequence[_Step], failed: _Step) -> MigError:
    """The same error, its message extended by the state the failure left the GPU in."""
    partial = [m.group(0) for m in SUCCESS_LINE.finditer(getattr(exc, "output", ""))]
    parts = [f"these steps had completed: {_describe(done)}"] if done else []
    if partial:
        parts.append(
            f"`{shlex.join(failed.argv)}` did this before it failed: " + "; ".join(partial)
        )
    if isinstance(exc, NvidiaSmiTimeout):
        parts.append(f"`{shlex.join(failed.argv)}` was stopped midway")
    if not parts:
        note = f"Nothing was changed on GPU {gpu}."
    else:
        changed = (
            "may be partly changed"
            if isinstance(exc, NvidiaSmiTimeout)
            else "is now partly changed"
        )
        note = (
            f"GPU {gpu} {changed}: {'; and '.join(parts)}. Run `gpudesk mig list` to see "
            f"its state, then apply the layout again once the cause is fixed, or "
            f"`gpudesk mig clear --gpu {gpu}`."
        )
    message = f"{exc.message} {note}"
    if isinstance(exc, NvidiaSmiError):
        return NvidiaSmiError(message, exc.kind, exc.argv, exc.returncode, exc.output)
    return NvidiaSmiTimeout(message) if isinstance(exc, NvidiaSmiTimeout) else MigError(message)
