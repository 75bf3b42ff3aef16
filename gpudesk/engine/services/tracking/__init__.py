"""MLflow tracking, the engine's side (docs/tracking.md): one MLflow run per job, a sweep's
parent run, the metrics gpudesk measures. The engine never imports mlflow: a worker process per
job owner (`gpudesk.tracking.worker`) talks to the tracking stores, fed with JSON lines
(`gpudesk.tracking.messages`) through a non-blocking pipe and a bounded outbox (`outbox`,
`sidecar`); `tracker` is the engine's collaborator that gives each run what
`gpudesk.tracking.content` says it holds, and `store_health` what the workers say of their
stores."""
