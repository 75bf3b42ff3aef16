"""Data selection: presets that keep part of a dataset (`random-25`, `stratified-25`, ...),
computed once per dataset and method, cached under GPUDESK_HOME and shared by every job that
trains on that dataset.

What is cached is an *ordering* of the samples (most wanted first) or, for stratified methods,
an ordering within each class: any fraction of a cached method is then free. The cache key is
the dataset's content fingerprint (independent of sample order), the method, its parameters and
its proxy model. This package imports neither the engine's internals nor the screens.
"""
