"""The scheduling brain as a library: a station view in, a decision out. The placement policies
(FIFO and the collocation-aware ones: policy, policies, collocation, station_fit), what a job is
assumed to need (demand), the queue and what one member may do to it (user_limits), who may do
what (access), fair share (fairshare, usage_ledger), the interference model (interference) and
calibration's fit (calibration). No daemon and no hardware driver: the GPU states it reads are
built (gpu_states) from the telemetry the engine hands it, read through a protocol, and the
engine carries out what it decides."""
