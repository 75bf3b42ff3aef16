"""Plots of what the commands report (`--plot FILE` on `simulate`, `select compare`, `history` and
`show`): one module per plot, each drawing a matplotlib `Figure` from the typed records its command
already has, and a terminal rendering of the same for `--plot -`; `common` says where a plot goes
and saves it. docs/plots.md shows them.

matplotlib (the `plot` extra) is imported only when a figure is drawn: the CLI imports these
modules inside the commands, and `gpudesk --help`, `top` and the desk never load matplotlib.
In the layers (docs/architecture.md) the plots stand beside the desk: the CLI imports them; they
read api models and the simulator's results, and import neither the CLI nor the desk.
"""
