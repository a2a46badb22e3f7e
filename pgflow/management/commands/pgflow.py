"""``manage.py pgflow``: list, show and steer runs from a shell or a script.

    pgflow runs [--class C] [--status S] [--search Q] [--limit N]
    pgflow show RUN
    pgflow pause|resume|cancel|skip RUN
    pgflow rerun RUN --from STEP [--input JSON]
    pgflow signal RUN NAME [--payload JSON]

Every change takes ``--dry-run`` and ``--actor NAME`` and acts on ``--search Q`` instead of
RUN (after a count and a confirmation; ``--yes`` skips it, and without a terminal it is
required). ``--json`` prints one JSON document on stdout. Exit codes: ``pgflow.cli``.
The work is in :mod:`pgflow.cli`; this module parses, confirms and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ...cli import BAD_ARGUMENTS, NOT_CONFIRMED, NOT_FOUND, OK, REFUSED, CliError, listing, show
from ...cli.changes import CONTROL_OF, Change, actor_of
from ...cli.output import dumps
from ...core.states import CONTROLS

# What a subcommand ends with: its answer (the --json document), its lines of text, the exit
# code, and the one line the command errs with when that code is not OK.
Outcome = tuple[dict[str, Any], list[str], int, str]
EXIT_CODES = (
    f"exit codes: {OK} done (a dry run that would apply, a listing even when empty); {NOT_FOUND} no such run, "
    f"or no run matches the search; {BAD_ARGUMENTS} bad arguments; {REFUSED} the change does not apply to "
    f"the run's status (for a search: to one of its runs at least); {NOT_CONFIRMED} not confirmed"
)


class SubcommandParser(CommandParser):
    """A subcommand's parser: a usage error (an unknown option, a bad choice) under ``--json``
    also prints ``{"error", "exit_code"}`` on stdout, so a script reads every failure there."""

    def error(self, message: str) -> Any:
        # argparse stops at the first error, before the namespace says whether --json was given.
        if self.called_from_command_line and "--json" in sys.argv[2:]:
            sys.stdout.write(dumps({"error": f"{self.prog}: {message}", "exit_code": BAD_ARGUMENTS}) + "\n")
            sys.stdout.flush()
        return super().error(message)


class Command(BaseCommand):
    help = "List, show and steer pgflow runs: runs, show, pause, resume, cancel, skip, rerun, signal. " + EXIT_CODES

    def add_arguments(self, parser: CommandParser) -> None:
        parser.epilog = EXIT_CODES
        commands = parser.add_subparsers(
            dest="subcommand", metavar="SUBCOMMAND", required=True, parser_class=SubcommandParser
        )

        runs = commands.add_parser("runs", help="list runs, newest first", epilog=EXIT_CODES)
        runs.add_argument("--class", dest="workflow", metavar="C", help="a workflow class name or dotted path")
        runs.add_argument("--status", choices=listing.STATUSES, help="the run status")
        runs.add_argument("--search", metavar="Q", help="a search: 'status:paused class:Checkout input.customer.id:42'")
        runs.add_argument(
            "--limit",
            type=int,
            default=listing.DEFAULT_LIMIT,
            metavar="N",
            help=f"runs listed at most, 1 to {listing.MAX_LIMIT} (default {listing.DEFAULT_LIMIT})",
        )
        _json_option(runs)

        shown = commands.add_parser("show", help="one run: steps, phases, errors, events, the timeline")
        shown.add_argument("run", metavar="RUN", help="the run id")
        _json_option(shown)

        for verb, name in CONTROL_OF.items():
            control = commands.add_parser(verb, help=CONTROLS[name].effect, epilog=EXIT_CODES)
            control.add_argument("run", metavar="RUN", nargs="?", help="the run id (or --search)")
            _change_options(control)

        rerun = commands.add_parser(
            "rerun", help="start a new run from a step, copying the outputs before it", epilog=EXIT_CODES
        )
        rerun.add_argument("run", metavar="RUN", nargs="?", help="the run id (or --search)")
        rerun.add_argument("--from", dest="step", metavar="STEP", required=True, help="the step to start from")
        rerun.add_argument("--input", metavar="JSON", help="a JSON object: the new run's input (default: the run's)")
        _change_options(rerun)

        sent = commands.add_parser("signal", help="deliver a signal to a running or paused run", epilog=EXIT_CODES)
        sent.add_argument(
            "targets", metavar="RUN NAME", nargs="+", help="the run id and the signal name (NAME alone with --search)"
        )
        sent.add_argument("--payload", metavar="JSON", help="the signal's JSON payload (default null)")
        _change_options(sent)

    def handle(self, *args: Any, subcommand: str, as_json: bool = False, **options: Any) -> None:
        try:
            answer, lines, code, summary = self._run(subcommand, options, as_json=as_json)
        except CliError as exc:
            if as_json:
                self.stdout.write(dumps({"error": str(exc), "exit_code": exc.code}))
            raise CommandError(str(exc), returncode=exc.code) from None
        self.stdout.write(dumps(answer) if as_json else "\n".join(lines))
        if code != OK:
            raise CommandError(summary, returncode=code)

    # --- the subcommands ---------------------------------------------------------------------

    def _run(self, subcommand: str, options: dict[str, Any], *, as_json: bool) -> Outcome:
        now = timezone.now()
        if subcommand == "runs":
            answer = listing.list_runs(
                workflow=options["workflow"],
                status=options["status"],
                search=options["search"],
                limit=options["limit"],
                now=now,
            )
            return answer, listing.format_runs(answer), OK, ""
        if subcommand == "show":
            shown = show.details(listing.find_run(options["run"]), now=now)
            return shown, show.format_details(shown), OK, ""
        change, run_text = _change(subcommand, options)
        change.check()
        actor = actor_of(options["actor"])
        search = options["search"]
        if run_text is not None and search:
            raise CliError(
                f"give RUN or --search, not both (got RUN {run_text!r} and --search {search!r})", code=BAD_ARGUMENTS
            )
        if run_text is None and not search:
            raise CliError(f"{subcommand} needs RUN (a run id) or --search Q", code=BAD_ARGUMENTS)
        if run_text is not None:
            return self._one(change, listing.find_run(run_text), actor=actor, dry_run=options["dry_run"])
        return self._searched(change, search, actor=actor, options=options, as_json=as_json)

    def _one(self, change: Change, run: Any, *, actor: str, dry_run: bool) -> Outcome:
        problem = change.refusal(run)
        if problem:
            raise CliError(problem, code=REFUSED)
        if dry_run:
            answer = {"dry_run": True, "actor": actor, **change.would(run)}
            return answer, [f"dry run, nothing changed: would {answer['would']}"], OK, ""
        answer = {"dry_run": False, "actor": actor, **change.apply(run, actor=actor)}
        return answer, [f"{answer['done']}; it is {answer['status']} now"], OK, ""

    def _searched(self, change: Change, search: str, *, actor: str, options: dict[str, Any], as_json: bool) -> Outcome:
        runs = listing.searched(search)
        matched = runs.count()
        if matched == 0:
            raise CliError(f"no run matches --search {search!r}", code=NOT_FOUND)
        if matched > listing.MAX_LIMIT:
            raise CliError(
                f"{matched:,} runs match --search {search!r}; one command changes at most {listing.MAX_LIMIT:,}: "
                "narrow the search",
                code=BAD_ARGUMENTS,
            )
        plan = [(run, change.refusal(run)) for run in runs.order_by("pk")]
        applies = [run for run, problem in plan if problem is None]
        refused = [{"run_id": run.pk, "reason": problem} for run, problem in plan if problem is not None]
        answer: dict[str, Any] = {
            "search": search,
            "matched": matched,
            "dry_run": bool(options["dry_run"]),
            "actor": actor,
            "refused": refused,
        }
        refused_lines = [f"  refused: {row['reason']}" for row in refused]
        if options["dry_run"]:
            answer.update(would=[change.would(run) for run in applies], changed=0)
            lines = [f"dry run, nothing changed: {matched} runs match {search!r}; {len(applies)} would change:"]
            lines += [f"  would {row['would']}" for row in answer["would"]] + refused_lines
            return answer, lines, REFUSED if refused else OK, _refused_summary(refused)
        if applies:
            self._confirm(change, search, len(applies), len(refused), yes=options["yes"])
        applied = []
        for run in applies:
            try:
                applied.append(change.apply(run, actor=actor))
            except CliError as exc:
                refused.append({"run_id": run.pk, "reason": str(exc)})
        answer.update(applied=applied, changed=len(applied), refused=refused)
        lines = [f"{matched} runs match {search!r}; {len(applied)} changed:"]
        lines += [f"  {row['done']}; it is {row['status']} now" for row in applied]
        lines += [f"  refused: {row['reason']}" for row in refused]
        return answer, lines, REFUSED if refused else OK, _refused_summary(refused)

    def _confirm(self, change: Change, search: str, count: int, refused: int, *, yes: bool) -> None:
        runs = "1 run" if count == 1 else f"{count} runs"
        others = f" ({refused} more match but it does not apply to them)" if refused else ""
        question = f"{change.what} {runs} matching {search!r}{others}?"
        if yes:
            return
        if not sys.stdin.isatty():
            raise CliError(
                f"not confirmed: {question} There is no terminal to ask on; pass --yes to confirm", code=NOT_CONFIRMED
            )
        self.stderr.write(f"{question} [y/N] ", ending="")
        self.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise CliError("not confirmed: nothing changed", code=NOT_CONFIRMED)


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", dest="as_json", help="print one JSON document, for scripts")


def _change_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--search", metavar="Q", help="act on every run this search matches instead of RUN")
    parser.add_argument("--dry-run", action="store_true", help="say what would happen; change nothing")
    parser.add_argument(
        "--actor", metavar="NAME", help="who acts, in the audit trail as cli:NAME (default: your login)"
    )
    parser.add_argument("--yes", action="store_true", help="with --search: do not ask for confirmation")
    _json_option(parser)


def _change(subcommand: str, options: dict[str, Any]) -> tuple[Change, str | None]:
    """The subcommand's change and the RUN it names (None: --search)."""
    if subcommand in CONTROL_OF:
        return Change(verb=subcommand), options["run"]
    if subcommand == "rerun":
        given = _json(options["input"], "--input")
        if options["input"] is not None and not isinstance(given, dict):
            raise CliError(f"--input must be a JSON object, got {options['input']!r}", code=BAD_ARGUMENTS)
        return Change(verb="rerun", step=options["step"], input=given), options["run"]
    targets = options["targets"]
    if options["search"]:
        if len(targets) != 1:
            raise CliError(f"signal --search Q takes NAME alone, got {' '.join(targets)!r}", code=BAD_ARGUMENTS)
        run_text, name = None, targets[0]
    elif len(targets) != 2:
        raise CliError(f"signal takes RUN NAME (or NAME with --search), got {' '.join(targets)!r}", code=BAD_ARGUMENTS)
    else:
        run_text, name = targets
    return Change(verb="signal", name=name, payload=_json(options["payload"], "--payload")), run_text


def _json(text: str | None, option: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliError(f"{option} is not JSON ({exc}): {text!r}", code=BAD_ARGUMENTS) from None


def _refused_summary(refused: list[dict[str, Any]]) -> str:
    if not refused:
        return ""
    return f"refused for {len(refused)} run{'s' if len(refused) != 1 else ''}: " + "; ".join(
        row["reason"] for row in refused[:5]
    )
