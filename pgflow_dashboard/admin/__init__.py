"""The dashboard's admin pages, one module per admin, registered on the stock ``admin.site``.

Django's admin autodiscover imports ``pgflow_dashboard.admin``: importing the modules here
registers every admin (and :mod:`.runs` mounts the insights page on the site). The names
below are re-exported so ``from pgflow_dashboard.admin import WorkflowRunAdmin`` keeps working;
a setting a test patches (``MAX_BULK_RUNS``) is read from its own module, :mod:`.runs`.

- :mod:`.runs`: the runs list, its filters and bulk actions, the run page, insights;
- :mod:`.workers`: the live workers, and the "who may view runs may view this" rule;
- :mod:`.queues`: the Queues page, with Pause and Resume;
- :mod:`.tokens`: the MCP endpoint's bearer tokens;
- :mod:`.schedules`: schedules, and the form an admin-made one is checked with;
- :mod:`.alerts`: alert rules and the alerts they raised;
- :mod:`.inlines`: ``RunsInline``, an object's runs on its own change page;
- :mod:`.actions`: ``start_workflow_action``, an action starting a workflow per object, and
  ``StartWorkflowMixin``, which the admin listing it takes;
- :mod:`.subjects`: the run list's filter by subject type;
- :mod:`.savedviews`: saved views (named run list searches) and the run list's filter by one.
"""

from __future__ import annotations

from .actions import StartWorkflowMixin, start_workflow_action
from .alerts import KEEP, AlertAdmin, AlertRuleAdmin, AlertRuleForm, DeliveryInline, masked, unmasked
from .inlines import RunsInline
from .queues import QueueAdmin
from .runs import (
    MAX_BULK_RUNS,
    MAX_LISTED_APPLIED,
    MAX_LISTED_REFUSALS,
    ErrorClassFilter,
    ParentFilter,
    WorkflowClassFilter,
    WorkflowRunAdmin,
)
from .savedviews import SavedViewAdmin, SavedViewFilter
from .schedules import ScheduleAdmin, ScheduleForm
from .subjects import SubjectTypeFilter
from .tokens import AccessTokenAdmin
from .workers import SeenByRunViewers, WorkerAdmin

__all__ = [
    "KEEP",
    "MAX_BULK_RUNS",
    "MAX_LISTED_APPLIED",
    "MAX_LISTED_REFUSALS",
    "AccessTokenAdmin",
    "AlertAdmin",
    "AlertRuleAdmin",
    "AlertRuleForm",
    "DeliveryInline",
    "ErrorClassFilter",
    "ParentFilter",
    "SavedViewAdmin",
    "SavedViewFilter",
    "QueueAdmin",
    "RunsInline",
    "ScheduleAdmin",
    "ScheduleForm",
    "SeenByRunViewers",
    "StartWorkflowMixin",
    "SubjectTypeFilter",
    "WorkerAdmin",
    "WorkflowClassFilter",
    "WorkflowRunAdmin",
    "masked",
    "start_workflow_action",
    "unmasked",
]
