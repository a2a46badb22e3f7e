"""A step thread's Python for one attempt, without the database: the time from a claim to
its pending commit, as ``observability.attempt`` runs ``Runner.execute`` in a worker's step
thread, with the commit handed to a stub.

    .venv/bin/python benchmarks/step_path.py                  # a no-op body
    .venv/bin/python benchmarks/step_path.py --body logs      # a body that logs one line
    .venv/bin/python benchmarks/step_path.py --body realistic # realistic.py's three steps in turn
    .venv/bin/python benchmarks/step_path.py --profile        # and where the time goes

One thread, no other work: a busy worker's step threads take more CPU a step than this
(benchmarks/RESULTS.md, issue 35 part O), so compare trees with this, and the worker with
``realistic.py``. ``--body reads`` and ``--body realistic`` run ``ReadsOnly``'s and
``Realistic``'s steps in turn, the second step's claim bringing the first's output. A log line
goes through the worker's relay (runtime.logwriter) to a stream handler on /dev/null, with the
example project's format.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pstats
import sys
import timeit
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
os.environ.setdefault("DATABASE_URL", "postgres://unused@127.0.0.1:9/unused")  # nothing here queries it

import django  # noqa: E402 - after the settings above

django.setup()

from benchmarks.workflows import ReadsOnly, Realistic, ThreeNoops  # noqa: E402 - after setup
from pgflow import observability  # noqa: E402
from pgflow.runtime import logwriter  # noqa: E402
from pgflow.runtime.answer import Answer  # noqa: E402
from pgflow.runtime.runner import Runner  # noqa: E402
from pgflow.store.claims import claims_of  # noqa: E402
from pgflow.store.rows import RUN_COLUMNS, STEP_COLUMNS  # noqa: E402

AT = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def claims(workflow: type, step_name: str, count: int, outputs: str | None = None) -> list:
    """``count`` claims of ``step_name``, as a claim's rows would give them (``outputs``: the
    run's, as JSON, when the claim brings them)."""
    run = dict.fromkeys(RUN_COLUMNS)
    path = f"{workflow.__module__}.{workflow.__qualname__}"
    run.update(workflow_class=path, status="running", input='{"order": 1}', attributes="{}", created_at=AT)
    step = dict.fromkeys(STEP_COLUMNS)
    step.update(created_at=AT, scheduled_at=AT, queue="default")
    rows = [
        (index, index, step_name, 1, uuid.uuid4(), AT, *run.values(), *step.values(), outputs) for index in range(count)
    ]
    return claims_of(rows)


def cycle(workflow: type, count: int) -> list:
    """``count`` claims of ``workflow``'s three steps in turn, as ``realistic.py`` runs them:
    ``b``'s claim brings ``a``'s output (its body reads it)."""
    each = -(-count // 3)
    first, second = claims(workflow, "a", each), claims(workflow, "b", each, '{"a": {"order": 1}}')
    steps = zip(first, second, claims(workflow, "c", each), strict=True)
    return [claim for three in steps for claim in three][:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body", choices=("no-op", "logs", "reads", "realistic"), default="no-op")
    parser.add_argument("--number", type=int, default=30_000)
    parser.add_argument("--profile", action="store_true", help="then print cProfile's top functions")
    args = parser.parse_args()
    stop = None
    count = args.number * (2 if args.profile else 1)
    if args.body in ("logs", "realistic"):  # a log line: Realistic's last step, or each of its steps
        handler = logging.StreamHandler(open(os.devnull, "w"))  # open for the process's life
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        log = logging.getLogger("benchmarks.realistic")
        log.handlers[:] = [handler]
        log.setLevel(logging.INFO)
        log.propagate = False
        stop = logwriter.start()
    if args.body == "logs":
        held = iter(claims(Realistic, "c", count))
    elif args.body == "reads":
        held = iter(cycle(ReadsOnly, count))
    elif args.body == "realistic":
        held = iter(cycle(Realistic, count))
    else:
        held = iter(claims(ThreeNoops, "two", count))
    runner = Runner(finish=lambda item: True, finish_later=lambda item: Answer())

    def one() -> None:
        observability.attempt(next(held), worker="bench", execute=runner.execute)

    seconds = timeit.timeit(one, number=args.number)
    print(f"{args.body}: {seconds / args.number * 1e6:.1f} µs an attempt (Python {sys.version.split()[0]})")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(lambda: [one() for _ in range(args.number)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    if stop is not None:
        stop()


if __name__ == "__main__":
    main()
