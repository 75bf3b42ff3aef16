"""Prometheus metrics as a library (docs/metrics.md): `snapshot` (what is exported, as immutable
records, and the pure functions that build them from telemetry's readings), `histogram` (a
histogram of durations in fixed buckets, read as `Buckets`), `collector` (a snapshot as metric
families under dcgm-exporter's names) and `server` (prometheus_client's WSGI app on a threading
server of its own). Nothing here holds the daemon's state: a scrape renders the latest snapshot
it was handed. The engine's side (when to build a snapshot; starting, moving and stopping the
endpoint) is `gpudesk.engine.services.metrics.exporter`. Only `collector` and `server` import
prometheus_client, and the exporter imports them only when `[station] metrics_listen` is set."""
