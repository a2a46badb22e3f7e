"""Django's task framework, from wherever this Django has it: ``django.tasks`` (Django 6.0+)
or the ``django-tasks`` backport (``django_tasks``, for 5.2: ``pip install django-pgflow[tasks]``).

Picked once, here, so every other module of :mod:`pgflow.tasks` names one set of classes; the
backport's ``InvalidTaskError`` is Django's ``InvalidTask`` under its older name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # django-stubs describes django.tasks; the backport has the same names
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started

    SOURCE = "django.tasks"
else:
    try:
        from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
        from django.tasks.signals import task_enqueued, task_finished, task_started

        SOURCE = "django.tasks"
    except ImportError:  # Django 5.2: the backport
        try:
            from django_tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
            from django_tasks.backends.base import BaseTaskBackend
            from django_tasks.base import Task, TaskError
            from django_tasks.exceptions import InvalidTaskError as InvalidTask
            from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
            from django_tasks.signals import task_enqueued, task_finished, task_started
        except ImportError as exc:
            raise ImportError(
                "pgflow.tasks needs Django's task framework: Django 6.0 or later (django.tasks), or on "
                "Django 5.2 the django-tasks backport (pip install 'django-pgflow[tasks]')"
            ) from exc
        SOURCE = "django_tasks"

__all__ = [
    "SOURCE",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
