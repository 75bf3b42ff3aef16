"""`gpudesk calibrate` on a real GPU: probe processes, NVML readings, an MPS daemon of its own
(`runner`). The plan, the fit and the report are pure: gpudesk/policy/calibration.py."""
