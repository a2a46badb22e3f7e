"""A DATABASE_URL that points nowhere is one line, password hidden."""

from __future__ import annotations

from example_project.dburl import problem, redact


def test_redact_hides_the_password_only():
    assert redact("postgres://app:s3cret@db.local:5432/shop") == "postgres://app:***@db.local:5432/shop"
    assert redact("postgres://app@/shop?host=/run/pg") == "postgres://app@/shop?host=/run/pg"


def test_an_unreachable_database_is_one_line_naming_the_url_without_its_password():
    message = problem("postgres://app:s3cret@127.0.0.1:1/shop", timeout=2)
    assert message is not None
    assert message.startswith("cannot connect to DATABASE_URL postgres://app:***@127.0.0.1:1/shop: ")
    assert "s3cret" not in message
    assert "\n" not in message


def test_a_url_that_is_not_a_database_url_is_named():
    message = problem("mysqlx://nowhere")
    assert message is not None
    assert "mysqlx://nowhere" in message
