"""Glue for third-party Django apps, each module importing its app only when used."""
