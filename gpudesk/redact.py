"""Secrets in URIs, hidden before they are shown to someone they do not belong to.

A tracking store's URI may carry its credentials: `http://ada:S3cret@mlflow.lab/`,
`postgresql://ada:pw@db/mlflow`, `https://host/?token=…`. The engine shows a job's URI to
everyone who may list the job, so every such view goes through `redact_secrets` unless the
viewer is the job's owner or an admin (docs/shared-station.md, "Who sees what"); what the engine
writes where others read it (its log, job events) goes through it always.

`redact_secrets` takes a URI or a text that holds URIs (an error message naming its store) and
returns it with each userinfo password (`user:***@`) and each secret-looking query parameter
(`password=***`, `token=***` …) replaced; the rest (scheme, user, host, path) stays, so a
reader can still tell the stores apart. A leaf: stdlib only.
"""

from __future__ import annotations

import re

REDACTED = "***"

# A URI's authority up to its last `@` before the path: the userinfo (RFC 3986, 3.2.1: a
# password with `/`, `?`, `#` or `@` in it must be percent-encoded, and those end the
# authority). The password is what follows its first `:`.
_USERINFO = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/?#@:]*):(?P<password>[^\s/?#]*)@"
)

# Query parameters that name a secret: their value goes. Matched on the lower-cased name with
# `-` read as `_` (X-Amz-Signature, access-token), whole or as a part (db_password, sas_token).
_SECRET_WORDS = (
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "access_key",
    "signature",
    "sig",
    "credential",
    "credentials",
    "auth",
    "authorization",
    "session",
    "sas",
)
_QUERY_PARAM = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&;#\s?]+)=(?P<value>[^&;#\s]*)")


def _secret_name(name: str) -> bool:
    words = re.split(r"[_.]", name.lower().replace("-", "_"))
    joined = "_".join(words)
    return any(word in _SECRET_WORDS for word in words) or any(
        secret in joined for secret in ("password", "passwd", "secret", "token", "api_key")
    )


def _param(match: re.Match[str]) -> str:
    if not _secret_name(match["name"]) or not match["value"]:
        return match.group()
    return f"{match['lead']}{match['name']}={REDACTED}"


def redact_secrets(text: str) -> str:
    """`text` (a URI, or a message holding URIs) with each URI's userinfo password and each
    secret-looking query parameter's value replaced by `***`."""
    if "@" in text:
        text = _USERINFO.sub(
            lambda m: f"{m['head']}{m['user']}:{REDACTED}@" if m["password"] else m.group(), text
        )
    if "=" in text:
        text = _QUERY_PARAM.sub(_param, text)
    return text
