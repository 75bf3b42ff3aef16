"""Command help reads as paragraphs: no docstring line breaks left for typer to wrap raggedly."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer

from gpudesk.cli.main import build_app

app = build_app()


def commands(group: typer.Typer, prefix: str = "") -> list[tuple[str, str | None]]:
    found = [(prefix + (c.name or c.callback.__name__), c.help) for c in group.registered_commands]
    for sub in group.registered_groups:
        found += commands(sub.typer_instance, f"{prefix}{sub.name} ")
    return found


def test_every_commands_help_is_whole_paragraphs() -> None:
    found = commands(app)
    assert len(found) >= 30
    for name, text in found:
        assert text, f"{name} has no help"
        assert "\n" not in text.replace("\n\n", ""), f"{name}: a line break inside a paragraph"


def command_paths() -> list[list[str]]:
    """Every command and group of the real CLI, as the words that name it."""
    import typer.main

    paths: list[list[str]] = []

    def walk(command: object, path: list[str]) -> None:
        paths.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


def source_texts(path: list[str]) -> list[str]:
    """The help texts the source gives this command and its parameters."""
    import typer.main

    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    texts = [command.help or ""]
    texts += [getattr(p, "help", None) or "" for p in command.params]
    return texts


BRACKETED = re.compile(r"\[\[?[\w.-]+\]\]?")  # [[jobs]], [datasets], [report]
ANGLE_TYPE = re.compile(r"<[a-z_\[\], |]+>")  # <bool>, <list[str]>, <int>, <float range>


def test_help_renders_every_bracket_plain_types_and_readable_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gpudesk.cli.main import main

    paths = command_paths()
    assert len(paths) >= 35
    for path in paths:
        with pytest.raises(SystemExit) as ended:
            main([*path, "--help"])
        assert ended.value.code == 0, path
        out = capsys.readouterr().out
        where = "gpudesk " + " ".join(path)
        assert "[]" not in out, f"{where}: a bracket lost\n{out}"
        for text in source_texts(path):
            for token in BRACKETED.findall(text):
                assert token in out, f"{where}: {token} missing\n{out}"
        assert not ANGLE_TYPE.search(out), f"{where}: an <type> in help\n{out}"
        usage = [line for line in out.splitlines() if "Usage:" in line]
        assert usage and "{" not in usage[0], f"{where}: {usage}"
    # the two the issue names, in the words a reader sees
    main_help = _help(["run"], capsys)
    assert "[[jobs]] and [[sweeps]]" in main_help
    assert "Usage: gpudesk submit [OPTIONS] [--] COMMAND [ARGS]..." in _help(["submit"], capsys)
    submit = _help(["submit"], capsys)
    assert re.search(r"--gpus N\s", submit) and re.search(r"--json\s+Print", submit)


def _help(path: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    from gpudesk.cli.main import main

    with pytest.raises(SystemExit):
        main([*path, "--help"])
    return capsys.readouterr().out


def test_a_number_option_is_named_a_number_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    """An option with min= or max= has click's IntRange or FloatRange, which the help named
    TEXT (`gpudesk mig plan --gpu TEXT`, `gpudesk wait --timeout TEXT`)."""
    import typer.main

    from gpudesk.cli.main import build_app
    from gpudesk.cli.plain_help import option_metavar

    def numbers(command: Any) -> list[Any]:
        kinds = ("integer", "int range", "float", "float range")
        found = [p for p in command.params if getattr(p.type, "name", None) in kinds]
        return found + [
            p for sub in getattr(command, "commands", {}).values() for p in numbers(sub)
        ]

    options = numbers(typer.main.get_command(build_app()))
    assert len(options) >= 20
    for param in options:
        assert param.metavar or option_metavar(param) in ("N", "NUM"), param.opts
    assert re.search(r"--timeout NUM\s", _help(["wait"], capsys))
    assert re.search(r"--gpu N\s", _help(["mig", "plan"], capsys))


def test_an_abort_from_deeper_down_says_its_cause(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """click turns any EOFError into Abort; one that did not come from a prompt (a cut-short
    .pyc file read by an import: "marshal data too short") is said with its cause, not as a
    bare "aborted" that names nothing to look at."""
    from gpudesk import grid
    from gpudesk.cli.main import main

    def cut_short() -> list[object]:
        raise EOFError("marshal data too short")

    monkeypatch.setattr(grid, "regions", cut_short)
    with pytest.raises(SystemExit) as ended:
        main(["grid"])
    assert ended.value.code == 1
    said = capsys.readouterr().err
    assert said.strip() == "aborted (EOFError: marshal data too short)", said
