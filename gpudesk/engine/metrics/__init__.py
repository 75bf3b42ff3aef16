"""The engine's Prometheus metrics (docs/metrics.md): `snapshot` (what is exported, as immutable
records built on the engine's loop), `collector` (those records as Prometheus metric families),
`server` (the HTTP endpoint on its own thread) and `exporter` (the loop's side: when to build a
snapshot, starting, moving and stopping the endpoint). Only `collector` and `server` import
prometheus_client, and the exporter imports them only when `[station] metrics_listen` is set."""
