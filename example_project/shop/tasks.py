"""django-q2 tasks the order workflow fans out. Idempotent: a re-run changes nothing."""

from __future__ import annotations

import random
import time

from .models import Notification, Order


def notify_vendor(order_id: int, vendor_id: int) -> str:
    """Tell a vendor about an order (idempotent: one notification per order and vendor)."""
    time.sleep(random.uniform(0.05, 0.4))  # a slow mail server
    if vendor_id == 13:
        raise ConnectionError(f"vendor {vendor_id}'s inbox refuses mail (a deliberate demo failure: the order pauses)")
    Notification.objects.get_or_create(order_id=order_id, vendor_id=vendor_id)
    return f"vendor {vendor_id} notified of order {order_id}"


def order_exists(order_id: int) -> bool:
    return Order.objects.filter(pk=order_id).exists()
