"""The exit codes every `gpudesk` command shares (standard library only: the entry point loads it
before typer)."""

EXIT_FAILED = 1  # the command ran but something it did failed (a job, the engine)
EXIT_USAGE = 2  # bad input: a profile, an argument
EXIT_NOT_RUNNING = 3  # no engine runs for this home (`engine status`, a read, `top --once` of a
# station; any command whose station's engine is down: cli.failures), or `wait` / `logs -f`
# gave up on one that went away (gpudesk.cli.no_engine.engine_kept_waiting: only where it
# cannot be waited for; a restart is). `wait`'s status is
# otherwise a job's, any of 0-255: 3 may be a job's own (docs/jobs.md says how to tell)
# 4: `loader serve` failed for good, its settings cannot work (gpudesk.loader.protocol.EXIT_FINAL)
EXIT_TIMED_OUT = 124  # `wait --timeout`: as timeout(1)
EXIT_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C
