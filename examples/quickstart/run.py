"""Run a beat and a worker on the quickstart app and show the ticks they execute.

python examples/quickstart/run.py            # 20 seconds, then a summary
python examples/quickstart/run.py --seconds 0   # until Ctrl-C
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def celery(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(  # noqa: S603 - our own interpreter and fixed arguments
        [sys.executable, "-m", "celery", "-A", "app", *args],
        cwd=HERE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def show(process: subprocess.Popen[str], label: str, ticks: list[str], verbose: bool) -> None:
    assert process.stdout is not None
    for raw in process.stdout:
        line = raw.rstrip()
        if "TICK " in line:
            ticks.append(line)
            print(f"[worker] {line[line.index('TICK ') + 5 :]}", flush=True)
        elif verbose or "ERROR" in line or "CRITICAL" in line or "leadership" in line:
            print(f"[{label}] {line}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0, help="0 = until Ctrl-C")
    parser.add_argument("--verbose", action="store_true", help="show every log line")
    options = parser.parse_args()
    worker = celery("worker", "-P", "solo", "-l", "info", "-n", "quickstart@%h")
    beat = celery("beat", "-S", "celery_durable_beat.Scheduler", "-l", "info")
    ticks: list[str] = []
    for proc, label in ((worker, "worker"), (beat, "beat")):
        threading.Thread(
            target=show, args=(proc, label, ticks, options.verbose), daemon=True
        ).start()
    print("beat and worker started; ticks appear below (the first within ~2 s)", flush=True)
    try:
        if options.seconds:
            time.sleep(options.seconds)
        else:
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        for proc in (beat, worker):
            proc.send_signal(signal.SIGTERM)
        for proc in (beat, worker):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"\n{len(ticks)} ticks executed. Next steps:")
    for line in next_steps(f"{sys.executable} -m celery -A app"):
        print(line)
    return 0 if ticks else 1


NEXT_STEPS = (
    ("durable-beat list", "the schedules, their state and next tick"),
    ("durable-beat history heartbeat", "the audit trail of one schedule"),
    ("durable-beat check", "validate the config as beat would: run it in CI before a deploy"),
)
"""The commands the demo ends with (a test runs each against this app)."""


def next_steps(command: str) -> list[str]:
    """One line per next step: the command to paste, then what it shows."""
    return [
        f"  cd examples/quickstart && {command} {verb}    # {what}" for verb, what in NEXT_STEPS
    ]


if __name__ == "__main__":
    raise SystemExit(main())
