"""A tenant's own rows: the table exists in each tenant's schema, not in the public one."""

from django.db import models


class Note(models.Model):
    text = models.CharField(max_length=200)

    def __str__(self) -> str:
        return self.text
