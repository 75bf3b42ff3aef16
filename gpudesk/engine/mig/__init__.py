"""MIG as the hardware has it: the profile tables (profiles), what nvidia-smi prints and its
errors (nvidia_smi, records), layouts the hardware allows (layout) and driving nvidia-smi
(manager). Nothing here knows the queue or the engine: fitting layouts to the queue is
`gpudesk.engine.repartition`."""
