"""The exit codes every `gpudesk` command shares (standard library only: the entry point loads it
before typer)."""

EXIT_FAILED = 1  # the command ran but something it did failed (a job, the engine)
EXIT_USAGE = 2  # bad input: a profile, an argument
EXIT_NOT_RUNNING = 3  # no engine runs for this home (`engine status`, a read), or it stopped
# while `wait` or `logs -f` waited on it (gpudesk.cli.no_engine.engine_kept_waiting)
# 4: `loader serve` failed for good, its settings cannot work (gpudesk.loader.protocol.EXIT_FINAL)
EXIT_TIMED_OUT = 124  # `wait --timeout`: as timeout(1)
EXIT_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C
