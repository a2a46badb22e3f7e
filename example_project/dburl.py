"""Check a DATABASE_URL before anything uses it, and say in one line what failed."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def problem(url: str, *, timeout: int = 5) -> str | None:
    """None when the database answers, else one line naming the URL (password hidden) and the failure."""
    import environ
    import psycopg

    try:
        config = environ.Env.db_url_config(url)
    except Exception as exc:  # noqa: BLE001 - any parse failure is reported as one line
        return f"DATABASE_URL {redact(url)} is not a database URL: {exc}"
    params = {
        "dbname": config.get("NAME") or None,
        "user": config.get("USER") or None,
        "password": config.get("PASSWORD") or None,
        "host": config.get("HOST") or None,
        "port": config.get("PORT") or None,
        "connect_timeout": timeout,
    }
    try:
        with psycopg.connect(**{k: v for k, v in params.items() if v is not None}):
            return None
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())
        return f"cannot connect to DATABASE_URL {redact(url)}: {reason}"
