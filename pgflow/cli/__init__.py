"""``manage.py pgflow``: the runs on the command line, for an operator's shell and for scripts.

- :mod:`.listing` lists runs (``runs``) and finds one (``RUN``);
- :mod:`.show` tells one run in full (``show``): attempts, phases, errors, events, the
  timeline as text and the run page's "why" sentence;
- :mod:`.changes` plans and applies the changes (``pause``, ``resume``, ``cancel``, ``skip``,
  ``rerun``, ``signal``) through the same API as the admin and the MCP server (the run's own
  controls, ``run.rerun_from``, ``pgflow.signal``), so each lands in the one audit trail with
  its actor (``cli:<name>``);
- :mod:`.text` writes times and durations.

The command (``pgflow/management/commands/pgflow.py``) parses, asks for confirmation and
prints; these modules read and act, and raise :class:`CliError` with the exit code.
"""

from __future__ import annotations

# Exit codes a script can branch on (README "Command line", docs/reference.md).
OK = 0  # done; a dry run that would apply; a listing (even an empty one)
NOT_FOUND = 1  # no run with that id, or no run matches the search
BAD_ARGUMENTS = 2  # an unknown option, a bad search, JSON or run id (argparse's own code too)
REFUSED = 3  # the change does not apply to a run's status (for a search: to at least one run)
NOT_CONFIRMED = 4  # a change to a search's runs was not confirmed (answered no, or no terminal and no --yes)


class CliError(Exception):
    """What went wrong, in words that name it, and the exit code it ends the command with."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code
