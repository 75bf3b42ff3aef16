"""Where jobs run: the placement policies (FIFO and the collocation-aware ones), what a job is
assumed to need, the job queue, the GPU states the policies read, and the trace simulator that
judges them."""
