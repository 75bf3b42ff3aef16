"""MIG as the hardware has it: what nvidia-smi prints and its errors (nvidia_smi), layouts the
hardware allows (layout) and driving nvidia-smi (manager); the profile tables and the records
are gpudesk.core (mig_profiles, mig_records). Nothing here knows the queue or the engine:
fitting layouts to the queue is `gpudesk.engine.station.repartition`."""
