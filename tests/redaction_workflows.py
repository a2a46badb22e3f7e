"""A workflow whose body fails quoting secrets, for the MCP redaction tests (importable by the
``pgflow_mcp`` subprocess, since runs store their class's dotted path)."""

from __future__ import annotations

import pgflow
from pgflow import step

TOKEN = "tok_9d8c7b6a5f"  # in the message only, after its key: never in the input


class LeaksPassword(pgflow.Workflow):
    @step
    def login(self):
        password = self.run.input["profile"]["password"]
        raise RuntimeError(
            f"login as {self.run.input['user']} refused: {password} is wrong "
            f"(smtp://mailer:{password}@mail.example.com, token={TOKEN})"
        )
