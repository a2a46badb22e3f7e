"""The dotted paths stored in django-q2's rows keep importing: a queued member task names
``pgflow.fanout.run_member`` and its hook ``pgflow.fanout.member_hook``, whichever module of
the package defines them."""

from __future__ import annotations

import pydoc

from pgflow import fanout
from pgflow.fanout import djangoq


def test_the_stored_runner_and_hook_paths_import_the_functions():
    assert (fanout.RUNNER, fanout.HOOK) == ("pgflow.fanout.run_member", "pgflow.fanout.member_hook")
    assert pydoc.locate(fanout.RUNNER) is djangoq.run_member
    assert pydoc.locate(fanout.HOOK) is djangoq.member_hook


def test_the_package_exports_what_it_lists():
    missing = [name for name in fanout.__all__ if not hasattr(fanout, name)]
    assert not missing, missing
