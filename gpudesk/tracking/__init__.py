"""MLflow tracking as a library (docs/tracking.md): the worker process that talks to the
tracking stores as a job's owner (`worker`, `python -m gpudesk.tracking.worker`: the only
importer of mlflow), the JSON lines between it and whoever feeds it (`messages`), what a job's
run holds, as pure functions of gpudesk's records (`content`), and whether this Python can track
at all (`available`). The engine's side (which runs exist, the workers it starts and feeds) is
`gpudesk.engine.services.tracking`; the worker is a program of its own, not the daemon, and
imports nothing of it."""
