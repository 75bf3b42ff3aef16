"""The `gpudesk` command line, one module per command group (the entry is gpudesk.cli.main)."""
