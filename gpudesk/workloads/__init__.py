"""Built-in workloads: small, real training jobs to queue, pack and watch with gpudesk.

Each workload is a module run with ``python -m``; it prints a ``config ...`` line, one
flushed line per epoch and a final ``result {json}`` line, and exits 0 on success.

``digits`` (:mod:`gpudesk.workloads.digits`)
    An MLP trained with cross-entropy on scikit-learn's bundled 8×8 handwritten digits
    (1,797 images, 10 classes; 20% held out for validation). A few seconds on one CPU
    core, most of it importing torch; uses CUDA when torch can see it::

        python -m gpudesk.workloads.digits --epochs 10 --lr 0.05 --threads 1
        python -m gpudesk.workloads.digits --help

    Exit status: 0 done, 1 no data, 2 bad arguments, 3 training diverged, 143 on SIGTERM.

:mod:`gpudesk.workloads.data` loads the datasets with numpy alone (no torch, and no
``import sklearn``, which is slow to import).

Nothing heavy is imported here: importing this package must stay cheap.
"""
