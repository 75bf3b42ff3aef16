"""What the daemon starts only when it is configured or asked for: the metrics exporter
(`[station] metrics_listen`), MLflow tracking (jobs with a `tracking` table) and the shared
loaders' supervisor (jobs naming a dataset)."""
