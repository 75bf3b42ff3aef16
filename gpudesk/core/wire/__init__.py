"""The wire's types, one set for both sides: the engine builds its replies as them (msgspec
encodes them) and decodes each request's arguments into them; `gpudesk.api` encodes its requests
from them and decodes the replies and events into them. By topic: `base`, `jobs`, `station`,
`telemetry`, `mig`, `model`, `events`; `replies` (each op's reply type) and `requests` (each
op's arguments). Pure data and checks: msgspec and the standard library only.
"""
