"""The client library every front end (the command line, the desk) uses to talk to the engine."""
