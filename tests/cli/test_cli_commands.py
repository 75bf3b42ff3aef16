"""The root's command table (gpudesk.cli.main.ROOT_COMMANDS) says where every command lives, and a
command line that names one loads that module alone."""

from __future__ import annotations

from pathlib import Path

import typer.main
from conftest import EngineHandle, cli_in_fresh_python

from gpudesk.cli.main import GROUP_MODULES, ROOT_COMMANDS, build_app, modules_for


def defining_module(command: object) -> str:
    """The gpudesk.cli module a click command (or a group's first command) comes from."""
    callback = getattr(command, "callback", None)
    if callback is None:  # a group: where its commands are defined
        callback = next(iter(command.commands.values())).callback  # type: ignore[attr-defined]
    return str(callback.__module__).removeprefix("gpudesk.cli.")


def test_the_table_names_every_command_of_the_full_tree_and_where_it_lives() -> None:
    full = typer.main.get_command(build_app())
    found = {name: defining_module(command) for name, command in full.commands.items()}  # type: ignore[attr-defined]
    assert found == ROOT_COMMANDS
    # `gpudesk --help` lists them in the table's order
    assert list(full.commands) == list(ROOT_COMMANDS)  # type: ignore[attr-defined]
    assert set(GROUP_MODULES) <= set(ROOT_COMMANDS.values())


def test_a_named_command_builds_only_its_module_and_the_rest_build_everything() -> None:
    assert modules_for(["queue", "--all"]) == ["jobs"]
    assert modules_for(["engine", "status"]) == ["engine"]
    assert modules_for([]) == ["desk"]  # `gpudesk` alone opens the desk
    for argv in (["--help"], ["--readonly"], ["quue"], ["--version"]):
        assert modules_for(argv) is None, argv
    partial = typer.main.get_command(build_app(modules_for(["queue"])))
    assert set(partial.commands) == {k for k, v in ROOT_COMMANDS.items() if v == "jobs"}  # type: ignore[attr-defined]
    # the command line's own command, alone of its module's (a group keeps all of its own)
    alone = typer.main.get_command(build_app(["jobs"], "queue"))
    assert set(alone.commands) == {"queue"}  # type: ignore[attr-defined]
    engine = typer.main.get_command(build_app(["engine"], "engine"))
    assert set(engine.commands["engine"].commands) >= {"start", "stop", "status"}  # type: ignore[attr-defined]


def test_gpudesk_queue_help_imports_no_other_command_module() -> None:
    printed, modules = cli_in_fresh_python(["queue", "--help"])
    assert "gpudesk queue" in printed
    loaded = {m for m in modules if m.startswith("gpudesk.cli.")}
    assert "gpudesk.cli.jobs" in loaded
    others = {f"gpudesk.cli.{m}" for m in ROOT_COMMANDS.values() if m != "jobs"}
    assert not loaded & others, loaded & others


def test_a_profile_run_and_its_report_import_no_numpy_pandas_torch_or_mlflow(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """`gpudesk run` to its report needs none of them, and each would cost every run ~0.1-1.5 s
    of CPU before it starts: numpy came with the selection cache, which the report asks for the
    pre-passes' entries (docs/benchmarks.md)."""
    profile = tmp_path / "p.toml"
    profile.write_text(
        'name = "p"\n[station]\nbackend = "none"\nslots = 2\n'
        '[[jobs]]\nname = "a"\ncommand = ["true"]\n'
    )
    printed, modules = cli_in_fresh_python(["run", str(profile)])
    assert "p: 1 succeeded" in printed, printed
    heavy = {"numpy", "pandas", "torch", "mlflow"}
    assert not modules & heavy, modules & heavy
