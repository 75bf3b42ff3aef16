"""Two small jobs for the tests of learning from progress lines (tests/engine/test_learning_live.py,
tests/shared/test_shared_learning.py), run with any Python (a shared station's users run them
with the system's): a watched job that prints `progress DONE/TOTAL` and slows itself down while
a flag file exists, and a sharer that makes the flag for as long as it runs.

The jobs run on the CPU and do not really slow each other: what the watched job shows beside its
sharer is a rate of 1 / SLOWER of its rate alone. A sharer's command runs alone first, printing
progress, so that its SM share alone is known (an interval beside a command of unknown share
teaches nothing); beside the watched job it runs with SHARER_QUIET=1 in its environment (the
same command, so the same share) and prints none, so its own intervals teach nothing: only the
watched job's rate is what the tests read.

    python -c WATCHED FLAG SECONDS [SLOWER [STOP]]   # SLOWER: 2; STOP: a file that ends it sooner
    python -c SHARER FLAG SECONDS
"""

WATCHED = """
import os, sys, time
flag, seconds = sys.argv[1], float(sys.argv[2])
slower = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
stop = sys.argv[4] if len(sys.argv) > 4 else None
end, step = time.monotonic() + seconds, 0
while time.monotonic() < end and not (stop and os.path.exists(stop)):
    step += 1
    print(f"progress {step}/10000000", flush=True)
    time.sleep(0.02 * (slower if os.path.exists(flag) else 1.0))
"""
SHARER = """
import os, sys, time
flag, seconds = sys.argv[1], float(sys.argv[2])
quiet = os.environ.get("SHARER_QUIET") == "1"
open(flag, "w").close()
try:
    for step in range(int(seconds / 0.05)):
        if not quiet:
            print(f"progress {step}", flush=True)
        time.sleep(0.05)
finally:
    os.unlink(flag)
"""
