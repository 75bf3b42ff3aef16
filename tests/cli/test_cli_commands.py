"""The root's command table (gpudesk.cli.main.ROOT_COMMANDS) says where every command lives, and a
command line that names one loads that module alone."""

from __future__ import annotations

import typer.main
from conftest import cli_in_fresh_python

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
