"""`python -m gpudesk`: the `gpudesk` command, its process ended as gpudesk.quick_exit ends it."""

# The interrupt ledger goes in before anything else is imported: a Ctrl-C that Python swallows
# in an import must be counted (gpudesk.cli.entry says why). One that lands in these imports
# exits 130 quietly, as the command does once loaded.
try:
    from gpudesk.cli.interrupts import INTERRUPTS

    INTERRUPTS.install()
    from gpudesk.cli.entry import main
    from gpudesk.quick_exit import run_and_leave
except KeyboardInterrupt:
    from gpudesk.cli.exit_codes import EXIT_INTERRUPTED

    raise SystemExit(EXIT_INTERRUPTED) from None

run_and_leave(main)
