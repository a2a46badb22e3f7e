"""The workflow DSL: the base class, its decorators, its building and its checks.

- :mod:`~pgflow.workflow.base`: :class:`Workflow` and ``@step`` / ``@fan_out`` / ``@cancel_if``,
  what a user's class and a step body's ``self`` see;
- :mod:`~pgflow.workflow.building`: the metaclass and the fold of a class's declarations
  down the MRO into a frozen step list, policies and cancel conditions;
- :mod:`~pgflow.workflow.problems`: :func:`definition_problems` and :func:`matcher_warnings`,
  raised at class creation and reported again by the system checks.

``pgflow.workflow.*`` is public (user code and stored import paths name it): every name once
public in the former single ``pgflow/workflow.py`` is re-exported here.
"""

from .base import Workflow, cancel_if, fan_out, step
from .building import RESERVED_NAMES, WorkflowType
from .problems import definition_problems, matcher_warnings

__all__ = [
    "RESERVED_NAMES",
    "Workflow",
    "WorkflowType",
    "cancel_if",
    "definition_problems",
    "fan_out",
    "matcher_warnings",
    "step",
]
