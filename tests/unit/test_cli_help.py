"""Command help reads as paragraphs: no docstring line breaks left for typer to wrap raggedly."""

from __future__ import annotations

import typer

from gpudesk.cli.main import app


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
