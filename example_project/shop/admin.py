"""The shop's orders in the admin, with their workflow runs: each order's page lists its
runs (``RunsInline``), and the list's actions start a fulfilment or a refund approval for
the selected orders (``start_workflow_action``)."""

from __future__ import annotations

from django.contrib import admin

from pgflow_dashboard.admin import RunsInline, StartWorkflowMixin, start_workflow_action

from .models import Order
from .workflows import OrderFulfilment, RefundApproval, fulfilment_key


@admin.register(Order)
class OrderAdmin(StartWorkflowMixin, admin.ModelAdmin):  # the mixin: who sees the start actions
    list_display = ("id", "customer", "status", "total_cents", "created_at")
    list_filter = ("status",)
    search_fields = ("customer", "email")
    inlines = [RunsInline]
    actions = [
        # One fulfilment per order, ever: the key makes a second click start nothing.
        start_workflow_action(
            OrderFulfilment,
            input=lambda order: {"gateway_flakiness": 0.3},
            key=fulfilment_key,
        ),
        # A refund's input (say {"amount_cents": 500}) is typed on the confirmation page.
        start_workflow_action(RefundApproval),
    ]
