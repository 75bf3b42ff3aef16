"""Issue 35, finding 7: a tracking URI's credentials are shown to no one but the job's owner and
the admins.

`gpudesk.redact.redact_secrets` hides a URI's userinfo password and its secret-looking query
parameters. The engine applies it to every view of another user's job or store (`show`, `queue`
and `engine status`, as JSON and as the CLI's text), and always to what it writes where others
read (its log, the jobs' events). The owner and the admins see the URI whole.

The end-to-end test needs root (real users), a real system engine, and a Python the users may
run (the owner's tracking worker runs it, and so does the users' CLI here): each is skipped,
saying why, where it cannot run.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from station_fixture import Station

from gpudesk.redact import redact_secrets

SECRET = "S3cret"
URI = f"http://ada:{SECRET}@127.0.0.1:1/?token=T0ken{SECRET}"  # nothing answers there


# --------------------------------------------------------------------------- the function
@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("http://ada:S3cret@127.0.0.1:1/", "http://ada:***@127.0.0.1:1/"),
        ("postgresql://ada:pw@db.lab/mlflow", "postgresql://ada:***@db.lab/mlflow"),
        ("mysql+pymysql://u:p%40ss@h:3306/m", "mysql+pymysql://u:***@h:3306/m"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),  # an unencoded @: to the last
        ("https://h/api?token=abc&run=1", "https://h/api?token=***&run=1"),
        (
            "https://h/?X-Amz-Signature=s&X-Amz-Date=d",
            "https://h/?X-Amz-Signature=***&X-Amz-Date=d",
        ),
        ("postgresql:///db?host=/run&password=x", "postgresql:///db?host=/run&password=***"),
        ("https://h/?db_password=x#frag", "https://h/?db_password=***#frag"),
        ("https://h/?api_key=k;session=s", "https://h/?api_key=***;session=***"),
        # nothing secret: left as it is
        ("sqlite:////home/ada/mlflow.db", "sqlite:////home/ada/mlflow.db"),
        ("http://ada@mlflow.lab:5000", "http://ada@mlflow.lab:5000"),
        ("http://mlflow.lab:5000/?experiment=3", "http://mlflow.lab:5000/?experiment=3"),
        ("databricks://profile", "databricks://profile"),
    ],
)
def test_a_uris_secrets_are_redacted_and_the_rest_kept(uri: str, shown: str) -> None:
    assert redact_secrets(uri) == shown


def test_secrets_in_a_message_are_redacted_wherever_the_uri_sits() -> None:
    message = (
        "MlflowException: API request to http://ada:S3cret@127.0.0.1:1/api/2.0/mlflow/runs/"
        "create failed; also tried https://h/?token=abc"
    )
    shown = redact_secrets(message)
    assert "S3cret" not in shown and "abc" not in shown
    assert "http://ada:***@127.0.0.1:1/api/2.0/mlflow/runs/create" in shown


# ------------------------------------------------------------------------ end to end
def cli(station: Station, role: str, *args: str) -> str:
    """The gpudesk CLI as `role`'s user, talking to the station's engine: its output."""
    done = station.gpudesk_as(role, *args)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def engine_log(station: Station) -> str:
    return station.log.read_text(errors="replace")  # a system engine logs to its stderr


def every_view(station: Station, role: str, job_id: int) -> dict[str, Any]:
    return {
        "show": station.ok(role, "show", job=job_id),
        "jobs": station.ok(role, "jobs"),
        "status": station.ok(role, "status"),
    }


@pytest.mark.slow(7)
def test_a_tracking_uris_password_is_shown_to_its_owner_and_the_admins_only(
    user_station: Station,
) -> None:
    station = user_station
    job = {
        "name": "tracked",
        "command": ["sleep", "60"],
        "workdir": "/",
        "tracking": {"mlflow_uri": URI, "experiment": "secret"},
    }
    job_id = station.submit("ada", job)
    # Her worker tries the store and fails: the engine logs it, and `status` shows its error.
    deadline = time.monotonic() + 90
    while True:
        stores = station.ok("ada", "status")["tracking"]
        if stores and stores[0]["error"]:
            break
        assert time.monotonic() < deadline, stores
        time.sleep(0.2)
    if "could not be started" in stores[0]["error"]:
        pytest.skip(f"ada's tracking worker cannot start here: {stores[0]['error']}")

    # bob, a member who is neither its owner nor an admin, in every view
    seen = json.dumps(every_view(station, "bob", job_id))
    assert SECRET not in seen, seen
    assert "http://ada:***@127.0.0.1:1/?token=***" in seen  # the rest of the URI stays
    for args in (("show", str(job_id)), ("queue", "--json"), ("engine", "status")):
        text = cli(station, "bob", *args)
        assert SECRET not in text, (args, text)
    events = station.ok("ada", "show", job=job_id)["events"]
    assert SECRET not in json.dumps(events)  # the events: read by others, redacted always
    log = engine_log(station)
    assert "MLflow store http://ada:***@127.0.0.1:1/" in log  # it did log the store
    assert SECRET not in log

    for role in ("ada", "admin"):  # the owner and the admins see it whole
        views = every_view(station, role, job_id)
        assert views["show"]["tracking"]["mlflow_uri"] == URI
        assert views["show"]["job"]["spec"]["tracking"]["mlflow_uri"] == URI
        assert [s["mlflow_uri"] for s in views["status"]["tracking"]] == [URI]
        assert URI in cli(station, role, "show", str(job_id))
