"""The database's schema: its ordered migrations (PRAGMA user_version counts them), the store's
errors, and the names its rows use."""

from __future__ import annotations


class StoreError(RuntimeError):
    pass


class IncompatibleStore(StoreError):
    pass


class UnknownJob(StoreError):
    pass


ARRAY_OF_ROW = "json_extract(spec, '$.array_job')"  # a later task's array (jobs_by_array's key)
# Each entry moves the schema from version i to i + 1. Append only; never edit a shipped one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE environments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        digest TEXT NOT NULL UNIQUE,
        env TEXT NOT NULL
    );
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        grp TEXT,
        spec TEXT NOT NULL,
        base_env INTEGER REFERENCES environments (id),
        state TEXT NOT NULL
            CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
        priority INTEGER NOT NULL DEFAULT 0,
        submitted_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        attempts INTEGER NOT NULL DEFAULT 0,
        exit_code INTEGER,
        reason TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        kill_deadline REAL
    );
    CREATE INDEX jobs_by_state ON jobs (state, priority DESC, id);
    CREATE INDEX jobs_by_group ON jobs (grp);
    CREATE INDEX jobs_by_name ON jobs (name);
    CREATE TABLE attempts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL REFERENCES jobs (id),
        number INTEGER NOT NULL,
        state TEXT NOT NULL
            CHECK (state IN ('launching', 'running', 'exited', 'lost', 'launch_failed')),
        placement TEXT NOT NULL,
        dir TEXT NOT NULL,
        pid INTEGER,
        pid_started REAL,
        started_at REAL,
        ended_at REAL,
        exit_code INTEGER,
        signal INTEGER,
        reason TEXT,
        UNIQUE (job_id, number)
    );
    CREATE INDEX attempts_by_state ON attempts (state);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ts REAL NOT NULL,
        job_id INTEGER,
        attempt INTEGER,
        kind TEXT NOT NULL,
        state TEXT,
        message TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX events_by_job ON events (job_id, id);
    CREATE TABLE metric_samples (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ts REAL NOT NULL,
        source TEXT NOT NULL,
        metric TEXT NOT NULL,
        value REAL,
        job_id INTEGER
    );
    CREATE INDEX metric_samples_by_source ON metric_samples (source, metric, ts);
    CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """,
    # 2: telemetry. Downsampled series per GPU and per job attempt, and what each attempt used
    # (energy, CPU, memory, I/O), kept up to date while it runs. metric_samples was never written.
    """
    DROP TABLE metric_samples;
    CREATE TABLE gpu_samples (
        ts REAL NOT NULL,
        gpu INTEGER NOT NULL,
        metric TEXT NOT NULL,
        value REAL NOT NULL
    );
    CREATE INDEX gpu_samples_by_gpu ON gpu_samples (gpu, metric, ts);
    CREATE TABLE job_samples (
        ts REAL NOT NULL,
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        attempt_id INTEGER NOT NULL,
        metric TEXT NOT NULL,
        value REAL NOT NULL
    );
    CREATE INDEX job_samples_by_job ON job_samples (job_id, metric, ts);
    CREATE TABLE attempt_usage (
        attempt_id INTEGER PRIMARY KEY REFERENCES attempts(id),
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        updated_at REAL NOT NULL,
        usage TEXT NOT NULL
    );
    CREATE INDEX attempt_usage_by_job ON attempt_usage (job_id);
    """,
    # 3: demand. A job's raised demand after an out-of-memory death, and what earlier runs of
    # the same command measured (by command signature), for placing the next ones.
    """
    ALTER TABLE jobs ADD COLUMN demand TEXT;
    CREATE TABLE demand_history (
        signature TEXT PRIMARY KEY,
        memory_mib REAL NOT NULL,
        sm_pct REAL NOT NULL,
        runs INTEGER NOT NULL,
        updated_at REAL NOT NULL
    );
    """,
    # 4: job control. A queued job can be held (never started until released), and a finished
    # job requeued with a fresh attempt budget: attempts made before the latest requeue stay in
    # its history (and its attempt numbers continue) but do not count against max_attempts.
    """
    ALTER TABLE jobs ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN attempts_before_requeue INTEGER NOT NULL DEFAULT 0;
    """,
    # 5: learning on the station. The interference model's learner keeps, per GPU model and
    # parameter, the sum and count of the values single observations implied (and how many came
    # from calibration probes); a command's progress rate alone on a GPU is remembered by its
    # signature, so a later run sharing from its start can still be compared with it.
    """
    CREATE TABLE model_params (
        gpu_model TEXT NOT NULL,
        param TEXT NOT NULL,
        total REAL NOT NULL,
        count INTEGER NOT NULL,
        calibrated INTEGER NOT NULL DEFAULT 0,
        updated_at REAL,
        PRIMARY KEY (gpu_model, param)
    );
    CREATE TABLE alone_rates (
        signature TEXT PRIMARY KEY,
        rate REAL NOT NULL,
        runs INTEGER NOT NULL,
        updated_at REAL NOT NULL
    );
    """,
    # 6: the learner refits every parameter from the observations themselves (a value one
    # observation implies depends on the other parameters, so a sum of values taken as they came
    # is confounded): the newest observations per GPU model are kept, each in the wire format of
    # `model_observe` (JSON), with its source and time. model_params is no longer written: it
    # holds what a version-5 store had learned, totals of observations that were not kept, which
    # the learner cannot refit and takes as they are until `gpudesk model reset` drops them.
    """
    CREATE TABLE model_observations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        gpu_model TEXT NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('learned', 'calibrated')),
        observed_at REAL,
        observation TEXT NOT NULL
    );
    CREATE INDEX model_observations_by_model ON model_observations (gpu_model, id);
    """,
    # 7: a shared station. Every job has an owner: the uid, primary group and supplementary
    # groups the kernel reported for the process that submitted it (a system engine runs the job
    # with them). Jobs of an older store were a personal engine's, so its user's: NULL reads as
    # the engine's own identity.
    """
    ALTER TABLE jobs ADD COLUMN owner_uid INTEGER;
    ALTER TABLE jobs ADD COLUMN owner_gid INTEGER;
    ALTER TABLE jobs ADD COLUMN owner_groups TEXT;
    CREATE INDEX jobs_by_owner ON jobs (owner_uid, state);
    """,
    # 8: MLflow tracking (docs/tracking.md). One row per MLflow run the engine made or is making:
    # a job's (job_id set) or a sweep's parent run (job_id NULL). `create_op` is the op that makes
    # it, sent again after a restart until `run_id` is known; `final` once its end (status,
    # totals, results) is in MLflow, so a restart neither loses nor repeats it; `step` where its
    # metrics' steps go on from.
    """
    CREATE TABLE tracking_runs (
        key TEXT PRIMARY KEY,
        job_id INTEGER REFERENCES jobs (id),
        uid INTEGER NOT NULL,
        uri TEXT NOT NULL,
        create_op TEXT NOT NULL,
        run_id TEXT,
        final INTEGER NOT NULL DEFAULT 0,
        step INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX tracking_runs_by_job ON tracking_runs (job_id);
    """,
    # 9: jobs submitted to a Slurm cluster (docs/slurm.md). One row per such job: the sbatch that
    # carries it (`submission`: a job's id, or an array's) and its task in it (NULL: not an
    # array), the id Slurm knows it by, its output file and script, and what Slurm last said.
    # A job without a row runs on the station.
    """
    CREATE TABLE slurm_jobs (
        job_id INTEGER PRIMARY KEY REFERENCES jobs (id),
        cluster TEXT NOT NULL,
        conf TEXT NOT NULL,
        submission TEXT NOT NULL,
        task INTEGER,
        own_id TEXT,
        output TEXT NOT NULL,
        script TEXT NOT NULL,
        gres TEXT,
        state TEXT,
        reason TEXT,
        node TEXT,
        cancel_sent INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX slurm_jobs_by_submission ON slurm_jobs (submission);
    """,
    # 10: when an attempt started on CLOCK_BOOTTIME, and in which boot (hw/boottime.py): its
    # time limit runs on that clock, not on the wall clock `started_at` is read from, so a
    # stepped clock neither ends it early nor lets it run over, across an engine restart too.
    """
    ALTER TABLE attempts ADD COLUMN started_boottime REAL;
    ALTER TABLE attempts ADD COLUMN boot_id TEXT;
    """,
    # 11: listings that stay fast on a long-lived store (docs/reliability.md, "Listings of the
    # whole store"). A finished job older than `[station] keep_finished_days` is archived: it
    # leaves the live listings (queue, desk) but history and accounting still read it. Partial
    # indexes give each listing its rows in id order without sorting the whole store: the live
    # window (queued and running), the finished jobs (history), the unarchived ones (a plain
    # listing), and what is due for archiving (by end); one state's unarchived jobs in id order
    # and every listing's count, read from an index alone; one user's jobs in id order. A query
    # uses a partial index only when its WHERE holds the index's terms word for word:
    # store/listing.py writes them from the same constants.
    """
    ALTER TABLE jobs ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX jobs_live ON jobs (id) WHERE state IN ('queued', 'running');
    CREATE INDEX jobs_finished ON jobs (id) WHERE state IN ('succeeded', 'failed', 'cancelled');
    CREATE INDEX jobs_unarchived ON jobs (id) WHERE archived = 0;
    CREATE INDEX jobs_to_archive ON jobs (ended_at) WHERE archived = 0;
    CREATE INDEX jobs_by_state_archived ON jobs (state, archived, id);
    CREATE INDEX jobs_by_owner_id ON jobs (owner_uid, id);
    """,
    # 12: indexes for issue 36 (a store of 100,000 jobs): attempts by their end, for fair
    # share's ledger (what ended since it last looked, what leaves the horizon: usage_ledger);
    # events by kind, for `status`'s latest station changes (events_of_kind), which else scan
    # every event.
    """
    CREATE INDEX attempts_by_end ON attempts (ended_at);
    CREATE INDEX events_by_kind ON events (kind, id);
    """,
    # 13: history by command family (gpudesk.policy.command_family: the command with its numeric
    # values taken out), so a sweep's members share what the first one measured: its peak
    # memory and SM activity (`runs` runs measured them, recorded once its memory settled) and
    # its mean run time (`finished` succeeded runs). demand_history (by exact command) stays:
    # the same command's own peak is placed with a smaller margin. The rows are filled from
    # what the store already holds (store/family_backfill.py), so no history is lost.
    """
    CREATE TABLE family_history (
        family TEXT PRIMARY KEY,
        memory_mib REAL,
        sm_pct REAL,
        runs INTEGER NOT NULL DEFAULT 0,
        run_s REAL,
        finished INTEGER NOT NULL DEFAULT 0,
        updated_at REAL NOT NULL
    );
    """,
    # 14: preemption (docs/preemption.md): the attempts since the last requeue that ended
    # preempted, which do not count against max_attempts; and on such an attempt the job it
    # made room for (its state stays what it was, `exited` or `lost`: the state column's CHECK
    # cannot change without rebuilding the table; the wire calls it `preempted`).
    """
    ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE attempts ADD COLUMN preempted_for INTEGER;
    """,
    # 15: suspension (`gpudesk suspend`, docs/jobs.md): when a running job was suspended (its
    # state stays `running`: the CHECK, as in 14; the wire calls it `suspended`), and on its
    # attempt the seconds it spent suspended and when its current suspension began on
    # CLOCK_BOOTTIME, which its time limit does not count.
    """
    ALTER TABLE jobs ADD COLUMN suspended_at REAL;
    ALTER TABLE attempts ADD COLUMN suspended_s REAL NOT NULL DEFAULT 0;
    ALTER TABLE attempts ADD COLUMN suspended_boottime REAL;
    """,
    # 16: how far a command family's memory hints were off (gpudesk.policy.hint_correction): per
    # family and distinct hint (MiB), the largest measured-peak / hint ratio of its settled runs.
    """
    CREATE TABLE family_hint_ratios (
        family TEXT NOT NULL, hint_mib INTEGER NOT NULL, ratio REAL NOT NULL,
        PRIMARY KEY (family, hint_mib)
    );
    """,
    # 17: demand_history and family_history per owner, as family_hint_ratios are: keys become
    # "{uid}:{signature}" and "{uid}:{family}" (policy.command_family.owner_key), so one member's
    # runs in a shared folder never set another's room or remaining time. No column changes:
    # store/family_backfill.py's rekey_by_owner gives each row to the owners whose jobs it holds
    # (a succeeded job, or for a family one whose peak settled), read from the jobs table; a
    # job stored without owner (schema 7) is the engine's user's. One such owner: the row is
    # hers, exactly (always so on a personal engine). Several: the rows are sums and maxima that
    # cannot be split, so each gets a copy of its memory and SM figures (the largest peak is at
    # least her own, so no room shrinks: the safe side) and, for a family, the mean run time of
    # her own succeeded jobs (their last attempts, less time suspended). A row no stored job
    # matches goes to the engine's user (on a system engine no member reads it again).
    """
    -- the rows are re-keyed by store/family_backfill.py's rekey_by_owner
    """,
    # 18: whose job each kept observation came from (its uid; NULL: a calibration, or a row kept
    # before), so the learner hears each member as one voice (policy/learner.py `_blend`).
    """
    ALTER TABLE model_observations ADD COLUMN owner_uid INTEGER;
    """,
    # 19: alone_rates per owner too ("{uid}:{signature}"): a shared observation's rate is read
    # against the rate alone of the same command, which must be its owner's own runs' (as 17).
    """
    -- the rows are re-keyed by store/family_backfill.py's rekey_by_owner
    """,
    # 20: beside a command's rate alone, its steady SM share alone (%, a mean over `sm_runs`):
    # its GPU's SM activity after its first progress line. A shared interval teaches the model
    # only where every tenant's is known (policy/progress_intervals.py says why); older: NULL.
    """
    ALTER TABLE alone_rates ADD COLUMN sm_pct REAL;
    ALTER TABLE alone_rates ADD COLUMN sm_runs INTEGER NOT NULL DEFAULT 0;
    """,
    # 21: the owner's user name at submission (core/known_owner.py's rule); older jobs: NULL
    "ALTER TABLE jobs ADD COLUMN owner_login TEXT;",
    # 22: an array's tasks by its id (store/jobs.py array_tasks); a damaged spec's row left out
    f"CREATE INDEX jobs_by_array ON jobs ({ARRAY_OF_ROW}) WHERE json_valid(spec) AND "
    f"{ARRAY_OF_ROW} IS NOT NULL;",
    # 23: the unarchived listing's index carries the name, so a `jobs` request's name pattern is
    # matched in it, reading only the rows listed (store/listing.py)
    "DROP INDEX jobs_unarchived;CREATE INDEX jobs_unarchived ON jobs (id, name) WHERE archived = 0",
)
SCHEMA_VERSION = len(MIGRATIONS)

LIVE_ATTEMPT_STATES = ("launching", "running")
# The WHERE terms of the listing migration's partial indexes, word for word (a query that states
# them otherwise, or with bound parameters, is not matched to the index by SQLite's planner).
LIVE_JOBS_TERM = "state IN ('queued', 'running')"
FINISHED_JOBS_TERM = "state IN ('succeeded', 'failed', 'cancelled')"
UNARCHIVED_TERM = "archived = 0"
# The gpu_samples metric holding the energy a GPU used over each stored window, in joules (a
# sum, where the other metrics are means): what "energy today" adds up.
GPU_ENERGY_METRIC = "energy_j"
