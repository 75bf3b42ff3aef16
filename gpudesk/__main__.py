from gpudesk.cli.entry import main
from gpudesk.quick_exit import run_and_leave

run_and_leave(main)
