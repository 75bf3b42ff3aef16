"""The engine's Prometheus metrics (docs/metrics.md): `exporter`, the loop's side: when to build a
snapshot, starting, moving and stopping the endpoint. What is exported, how it is named and
served is the library `gpudesk.metrics`."""
