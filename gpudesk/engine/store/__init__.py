"""The engine's durable state in SQLite: schema and errors, records, the connection (events,
settings), jobs and attempts, samples and usage; `database.Store` puts them together."""
