"""The desk's footer rebuilds only when the keys it shows change (`DeskFooter`): focus moving
between widgets that show the same keys leaves it as it is; focus moving to one with other keys
rebuilds it, and it shows them."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Button
from textual.widgets._footer import FooterKey

from gpudesk.screens.widgets.footer import DeskFooter


class Plain(Button):
    pass


class WithKey(Button):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("x", "press", "Extra")]


class Counted(DeskFooter):
    builds = 0

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            Counted.builds += 1
        yield from super().compose()


class Demo(App[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit")]

    def compose(self) -> ComposeResult:
        yield Plain("one", id="one")
        yield Plain("two", id="two")
        yield WithKey("three", id="three")
        yield Counted()


def shown(app: Demo) -> list[str]:
    return sorted(str(key.description) for key in app.query(FooterKey) if key.description)


def test_the_footer_rebuilds_only_for_other_keys() -> None:
    async def main() -> None:
        app = Demo()
        async with app.run_test() as pilot:
            await pilot.pause()
            app.query_one("#one").focus()
            await pilot.pause()
            before, keys = Counted.builds, shown(app)
            assert keys == ["Quit", "palette"]
            app.query_one("#two").focus()  # the same keys
            await pilot.pause()
            await pilot.pause()
            assert Counted.builds == before and shown(app) == keys
            app.query_one("#three").focus()  # one more key
            await pilot.pause()
            await pilot.pause()
            assert Counted.builds == before + 1
            assert shown(app) == ["Extra", "Quit", "palette"]
            app.query_one("#one").focus()  # and back
            await pilot.pause()
            await pilot.pause()
            assert shown(app) == keys

    asyncio.run(main())
