"""The orchestrator: store, job model, daemon and client, runner, placement policy."""
