"""The example shop's domain: orders placed by customers, fulfilled by a workflow."""

from __future__ import annotations

from django.db import models

import pgflow


class Order(models.Model):
    class Status(models.TextChoices):
        PLACED = "placed"
        PAID = "paid"
        SHIPPED = "shipped"
        CANCELLED = "cancelled"

    customer = models.CharField(max_length=100)
    email = models.EmailField()
    total_cents = models.PositiveIntegerField()
    vendors = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PLACED)
    reviewed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # order.workflow_runs: the runs started with subject=order (no column, no migration).
    workflow_runs = pgflow.RunsRelation()

    def __str__(self) -> str:
        return f"order {self.pk} ({self.customer})"


class Notification(models.Model):
    """What the vendor-notification tasks 'sent' (a stand-in for e-mail)."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE)
    vendor_id = models.PositiveIntegerField()
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["order", "vendor_id"], name="shop_one_notice_per_vendor")]

    def __str__(self) -> str:
        return f"vendor {self.vendor_id} told of order {self.order_id}"
