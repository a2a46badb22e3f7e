"""The MCP server driven by the SDK's own client: over stdio (a real ``manage.py pgflow_mcp``
process) and over streamable HTTP (a real ``runserver`` process), as users with and without
each permission."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.utils import timezone
from mcp import Client, StdioServerParameters
from mcp_types import Implementation

import pgflow
from pgflow.models import AccessToken, Event, WorkflowRun
from pgflow.testing import run_workflow
from pgflow_dashboard import insights
from pgflow_dashboard.mcp import tokens
from pgflow_dashboard.mcp.server import INSTRUCTIONS
from pgflow_dashboard.window import WorkflowWindow
from tests import composition_workflows as cw
from tests import workflows as wf

ROOT = Path(__file__).resolve().parents[2]
AGENT = "pytest-agent"
SECRET_INPUT = {"plan": "pro", "card": "4242 4242 4242 4242", "profile": {"password": "hunter2", "name": "Ada"}}


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "PGFLOW_TEST_DB_NAME": connection.settings_dict["NAME"],
        "PYTHONUNBUFFERED": "1",
    }


def _user(name: str, *perms: str, active: bool = True) -> User:
    user = User.objects.create_user(name, password="x", is_active=active)  # noqa: S106
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="pgflow", codename__in=perms))
    return user


@pytest.fixture
def users(transactional_db: None) -> dict[str, User]:
    return {
        "operator": _user("operator", "view_workflowrun", "change_workflowrun"),
        "viewer": _user("viewer", "view_workflowrun"),
        "nobody": _user("nobody"),
        "gone": _user("gone", "view_workflowrun", active=False),
    }


def stdio(username: str, session: Callable[[Client], Any]) -> Any:
    """Run ``session(client)`` against ``manage.py pgflow_mcp --user username``."""
    params = StdioServerParameters(
        command=sys.executable, args=["manage.py", "pgflow_mcp", "--user", username], cwd=str(ROOT), env=_env()
    )

    async def main() -> Any:
        async with Client(params, client_info=Implementation(name=AGENT, version="1")) as client:
            return await session(client)

    return anyio.run(main)


def answer(result: Any) -> Any:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def error(result: Any) -> str:
    assert result.is_error, result.content[0].text
    return result.content[0].text


# --- stdio ------------------------------------------------------------------------------------------


def test_stdio_refuses_a_missing_or_inactive_user(users):
    for name, expected in (("ghost", "no user named 'ghost'"), ("gone", "user 'gone' is inactive")):
        done = subprocess.run(
            [sys.executable, "manage.py", "pgflow_mcp", "--user", name],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode != 0
        assert expected in done.stderr


def instructions_tools() -> set[str]:
    """The tools the server's INSTRUCTIONS name, in its parenthesised lists."""
    return {name.strip() for listed in re.findall(r"\(([^)]*)\)", INSTRUCTIONS) for name in listed.split(",")}


def readme_tools() -> dict[str, set[str]]:
    """Tool name -> its parameters, from the first column of the README's MCP tool table
    (``name(a, b=1)``, or ``name``, ``other`` ``(a, b)`` for several of one signature)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Agents: the MCP server", 1)[1].split("\n## ", 1)[0]
    tools: dict[str, set[str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        pending: list[str] = []
        for chunk in re.findall(r"`([^`]*)`", line.split("|")[1]):
            name, _, args = chunk.partition("(")
            params = {arg.split("=")[0].strip() for arg in args.rstrip(")").split(",") if arg.strip()}
            if name:
                pending.append(name)
            if args or not name:
                tools.update(dict.fromkeys(pending, params))
                pending = []
        tools.update((name, set()) for name in pending)
    return tools


def test_stdio_read_tools_answer_with_secrets_masked(users):
    waiting = run_workflow(wf.WaitsForPayment.start(input=SECRET_INPUT))
    pgflow.signal(waiting, "note", {"api_key": "sk_live_1", "ok": True})
    paused = run_workflow(wf.Failing.start(key="order-7"))
    assert (waiting.status, paused.status) == ("running", "paused")

    async def session(client: Client) -> dict[str, Any]:
        names = {tool.name: set(tool.input_schema["properties"]) for tool in (await client.list_tools()).tools}
        return {
            "names": names,
            "bad_window": await client.call_tool("insights", {"window": "2h"}),
            "insights": await client.call_tool("insights", {"window": "24h"}),
            "search": await client.call_tool("search_runs", {"status": "paused"}),
            "by_key": await client.call_tool("search_runs", {"key": "order-7", "workflow": "Failing"}),
            "too_many": await client.call_tool("search_runs", {"limit": 201}),
            "run": await client.call_tool("get_run", {"run_id": waiting.pk}),
            "explain_waiting": await client.call_tool("explain_run", {"run_id": waiting.pk}),
            "explain_paused": await client.call_tool("explain_run", {"run_id": paused.pk}),
            "stuck": await client.call_tool("stuck", {}),
            "workers": await client.call_tool("workers", {}),
        }

    got = stdio("viewer", session)
    documented = readme_tools()
    assert set(got["names"]) == instructions_tools() == set(documented), "registered, INSTRUCTIONS, README"
    assert got["names"] == documented, "each tool's parameters as the README's MCP table lists them"
    assert "unknown window '2h'" in error(got["bad_window"])
    assert "1h, 24h, 7d, 30d" in error(got["bad_window"])
    figures = answer(got["insights"])
    assert set(figures) == set(insights.compute(WorkflowWindow.parse("24h", retention=None, now=timezone.now())))
    assert {row["workflow_class"] for row in figures["workflows"]} == {
        "tests.workflows.WaitsForPayment",
        "tests.workflows.Failing",
    }
    assert [run["run_id"] for run in answer(got["search"])["runs"]] == [paused.pk]
    assert [run["run_id"] for run in answer(got["by_key"])["runs"]] == [paused.pk]
    assert "limit must be a whole number from 1 to 200" in error(got["too_many"])

    run = answer(got["run"])
    assert run["run"]["input"] == {
        "plan": "pro",
        "card": "[redacted]",
        "profile": {"password": "[redacted]", "name": "Ada"},
    }
    assert run["signals"][0]["payload"] == {"api_key": "[redacted]", "ok": True}
    assert [(a["step_name"], a["status"]) for a in run["attempts"]] == [("order", "completed"), ("charge", "waiting")]
    assert set(run["attempts"][1]["durations"]) == {"waited", "throttled", "queued", "ran", "waiting"}
    assert run["attempts"][1]["segments"][-1]["kind"] == "waiting"
    assert [event["event"] for event in run["events"]][:1] == ["started"]
    assert "4242" not in got["run"].content[0].text and "hunter2" not in got["run"].content[0].text

    (waiting_says,) = answer(got["explain_waiting"])["explanation"]
    assert waiting_says.startswith("waiting for signal 'payment' since ")
    assert waiting_says.endswith("(then: cancel)")
    paused_says = answer(got["explain_paused"])["explanation"][0]
    assert paused_says.startswith("paused since ")
    assert "step boom (attempt 1) failed with RuntimeError: boom (policy: pause)" in paused_says

    stuck = answer(got["stuck"])
    assert stuck["paused"]["count"] == 1
    assert answer(got["workers"]) == {"live": 0, "gone": 0, "lease_seconds": stuck_lease(), "workers": []}


def stuck_lease() -> float:
    from pgflow.conf import pgflow_settings

    return pgflow_settings.seconds("LEASE")


def test_stdio_actions_dry_run_first_then_act_as_the_agent_for_the_user(users):
    run = run_workflow(wf.WaitsForPayment.start())
    events_before = list(run.events.values_list("event", flat=True))

    async def session(client: Client) -> dict[str, Any]:
        return {
            "dry_pause": await client.call_tool("pause_run", {"run_id": run.pk}),
            "resume_running": await client.call_tool("resume_run", {"run_id": run.pk, "dry_run": False}),
            "pause": await client.call_tool("pause_run", {"run_id": run.pk, "dry_run": False}),
            "dry_signal": await client.call_tool("send_signal", {"run_id": run.pk, "name": "payment"}),
            "resume": await client.call_tool("resume_run", {"run_id": run.pk, "dry_run": False}),
            "signal": await client.call_tool(
                "send_signal",
                {"run_id": run.pk, "name": "payment", "payload": {"token": "t0k", "amount": 5}, "dry_run": False},
            ),
            "missing": await client.call_tool("cancel_run", {"run_id": 10**9, "dry_run": False}),
        }

    got = stdio("operator", session)
    dry = answer(got["dry_pause"])
    assert dry["dry_run"] is True and dry["changed"] is False
    assert dry["would"].startswith("pause the run")
    assert "run is running" in error(got["resume_running"]) or "running run" in error(got["resume_running"])
    assert answer(got["pause"])["status"] == "paused"
    assert "it is kept until a step waiting for that name consumes it" in answer(got["dry_signal"])["would"]
    assert answer(got["resume"])["status"] == "running"
    assert answer(got["signal"])["changed"] is True
    assert "no workflow run with id 1000000000" in error(got["missing"])

    actor = f"agent:{AGENT} for user:operator"
    events = list(Event.objects.filter(run=run).order_by("created_at", "id").values_list("event", "actor"))
    assert [kind for kind, _ in events[: len(events_before)]] == events_before  # the dry runs wrote nothing
    assert events[len(events_before) :] == [("paused", actor), ("resumed", actor), ("signal_received", actor)]
    run.refresh_from_db()
    assert run.status == "running"
    assert run.step_set.get(step_name="charge", status="scheduled")  # woken by the signal


def test_stdio_skip_step_names_the_step_and_skips_nothing_once_the_run_moved_on(users):
    from tests import dashboard_workflows as dw

    run = dw.Later.start()  # at "later" for an hour, then "after"

    async def session(client: Client) -> dict[str, Any]:
        skip = {"run_id": run.pk, "step_name": "later", "dry_run": False}
        return {
            "dry": await client.call_tool("skip_step", {"run_id": run.pk}),
            "skip": await client.call_tool("skip_step", skip),
            "again": await client.call_tool("skip_step", skip),  # a repeated call: the run moved on
        }

    got = stdio("operator", session)
    assert "at step later" in answer(got["dry"])["would"]
    assert answer(got["skip"])["current_step"] == "after"
    assert f"run {run.pk}: its current step is 'after', not 'later'; nothing was skipped" in error(got["again"])
    assert run.events.filter(event="skipped").count() == 1


def test_stdio_rerun_from_says_what_it_would_copy_then_starts_the_linked_run(users):
    original = run_workflow(cw.Ledger.start(input={"n": 2, "amount": 3, "fail": True}))
    running = cw.Ledger.start(input={"amount": 1})
    assert original.status == "paused"
    events_before = list(original.events.values_list("event", flat=True))
    fixed = {"n": 2, "amount": 4}

    async def session(client: Client) -> dict[str, Any]:
        call = client.call_tool
        return {
            "dry": await call("rerun_from", {"run_id": original.pk, "step_name": "charge", "input": fixed}),
            "dry_same_input": await call("rerun_from", {"run_id": original.pk, "step_name": "fetch"}),
            "unknown_step": await call("rerun_from", {"run_id": original.pk, "step_name": "chrge", "dry_run": False}),
            "bad_input": await call(
                "rerun_from", {"run_id": original.pk, "step_name": "charge", "input": [1], "dry_run": False}
            ),
            "running": await call("rerun_from", {"run_id": running.pk, "step_name": "fetch", "dry_run": False}),
            "rerun": await call(
                "rerun_from", {"run_id": original.pk, "step_name": "charge", "input": fixed, "dry_run": False}
            ),
        }

    got = stdio("operator", session)
    dry = answer(got["dry"])
    assert (dry["dry_run"], dry["changed"], dry["status"]) == (True, False, "paused")
    assert dry["copied"] == {"fetch": {"fetched": 2}} and dry["not_copied"] == []
    assert dry["input"] == fixed and dry["definition_changed"] is False
    assert dry["would"] == (
        f"start a new run of Ledger from step charge, copying the outputs of fetch, with the input given, "
        f"linked to run {original.pk}; run {original.pk} is paused, so it is cancelled as re-run"
    )
    same = answer(got["dry_same_input"])
    assert same["copied"] == {} and same["input"] == original.input and "copying no outputs" in same["would"]
    assert "has no step 'chrge'; its steps are fetch, charge, receipt" in error(got["unknown_step"])
    assert "input must be a JSON object, or null to keep the run's input; got list" in error(got["bad_input"])
    assert f"run {running.pk} is running: only a finished, cancelled or paused run" in error(got["running"])

    done = answer(got["rerun"])
    actor = f"agent:{AGENT} for user:operator"
    rerun = WorkflowRun.objects.get(rerun_of=original)  # the dry runs and the refusals started nothing
    assert (done["changed"], done["rerun_id"], done["status"], done["copied"]) == (
        True,
        rerun.pk,
        "cancelled",
        ["fetch"],
    )
    events = list(original.events.order_by("created_at", "id").values_list("event", "actor"))
    assert [kind for kind, _ in events[: len(events_before)]] == events_before
    assert events[len(events_before) :] == [("rerun_as", actor), ("cancelled", actor)]
    assert rerun.events.get(event="rerun_of").actor == actor
    rerun = run_workflow(rerun)
    assert rerun.status == "finished" and rerun.outputs["receipt"] == {"charge": {"fetched": 2, "amount": 4}}
    running.refresh_from_db()
    assert running.status == "running" and not running.reruns.exists()


def test_stdio_permissions_are_the_users(users):
    run = run_workflow(wf.Failing.start())

    async def session(client: Client) -> dict[str, Any]:
        return {
            "search": await client.call_tool("search_runs", {}),
            "resume": await client.call_tool("resume_run", {"run_id": run.pk, "dry_run": False}),
            "rerun": await client.call_tool("rerun_from", {"run_id": run.pk, "step_name": "boom"}),
        }

    viewer = stdio("viewer", session)
    assert answer(viewer["search"])["count"] == 1
    assert "lacks the pgflow.change_workflowrun permission" in error(viewer["resume"])
    assert "lacks the pgflow.change_workflowrun permission" in error(viewer["rerun"])  # even its dry run
    nobody = stdio("nobody", session)
    assert "lacks the pgflow.view_workflowrun permission" in error(nobody["search"])
    run.refresh_from_db()
    assert run.status == "paused"


# --- streamable HTTP -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_server(users: dict[str, User], tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    log = tmp_path / "runserver.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/mcp/"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx2.post(url, timeout=1)
            break
        except httpx2.TransportError:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(10)


def http(url: str, secret: str, session: Callable[[Client], Any], *, mode: str = "auto") -> Any:
    async def main() -> Any:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=60) as http_client:
            from mcp.client.streamable_http import streamable_http_client

            transport = streamable_http_client(url, http_client=http_client)
            async with Client(transport, client_info=Implementation(name=AGENT, version="1"), mode=mode) as client:  # type: ignore[arg-type]
                return await session(client)

    return anyio.run(main)


def test_http_without_a_valid_token_is_401_and_says_nothing(http_server, users):
    token, secret = tokens.issue(users["operator"], "revoked")
    AccessToken.objects.filter(pk=token.pk).update(revoked_at=token.created_at)
    _, inactive = tokens.issue(users["gone"], "inactive user")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in (
        {},
        {"Authorization": "Bearer pgflow_wrong"},
        {"Authorization": "Basic abc"},
        {"Authorization": f"Bearer {secret}"},
        {"Authorization": f"Bearer {inactive}"},
    ):
        response = httpx2.post(http_server, json=body, headers=headers, timeout=30)
        assert response.status_code == 401, headers
        assert response.content == b""


def test_http_get_is_refused_not_a_stream_held_open(http_server, users):
    # A GET asks for the stream of server-sent messages: a stateless exchange never ended it,
    # and the request held one of the site's workers for ever. MCP's answer without one: 405.
    _, secret = tokens.issue(users["viewer"], "viewer-bot")
    headers = {"Authorization": f"Bearer {secret}", "Accept": "text/event-stream"}
    answer = httpx2.get(http_server, headers=headers, timeout=10)
    assert answer.status_code == 405 and answer.headers["Allow"] == "POST, DELETE"


def test_http_tools_act_as_the_tokens_user(http_server, users):
    run = run_workflow(wf.Failing.start(input={"secret": "s3", "n": 1}))
    token, secret = tokens.issue(users["operator"], "ops-bot")
    _, viewer_secret = tokens.issue(users["viewer"], "viewer-bot")
    assert token.last_used_at is None and secret not in {token.digest, token.prefix}

    async def session(client: Client) -> dict[str, Any]:
        return {
            "run": await client.call_tool("get_run", {"run_id": run.pk}),
            "dry": await client.call_tool("cancel_run", {"run_id": run.pk}),
            "skip": await client.call_tool("skip_step", {"run_id": run.pk, "dry_run": False}),
        }

    got = http(http_server, secret, session)
    assert answer(got["run"])["run"]["input"] == {"secret": "[redacted]", "n": 1}
    assert answer(got["dry"])["changed"] is False
    assert answer(got["skip"])["status"] == "finished"
    skipped = Event.objects.get(run=run, event="skipped")
    assert skipped.actor == f"agent:{AGENT} for user:operator"
    token.refresh_from_db()
    assert token.last_used_at is not None

    other = run_workflow(wf.Failing.start())
    denied = http(
        http_server,
        viewer_secret,
        lambda client: client.call_tool("cancel_run", {"run_id": other.pk, "dry_run": False}),
        mode="legacy",
    )
    assert "lacks the pgflow.change_workflowrun permission" in error(denied)
    assert WorkflowRun.objects.get(pk=other.pk).status == "paused"


# --- secrets inside error text (issue 33, finding 13) ---------------------------------------------


def test_stdio_masks_secrets_in_error_messages_paused_reasons_and_event_details(users):
    from tests import redaction_workflows as rw

    password = "hunter2-zebra"
    run = run_workflow(rw.LeaksPassword.start(input={"user": "ada", "profile": {"password": password}}))
    assert run.status == "paused"
    assert password in run.paused_reason and rw.TOKEN in run.paused_reason  # what the body wrote is kept as is

    async def session(client: Client) -> dict[str, Any]:
        return {
            "run": await client.call_tool("get_run", {"run_id": run.pk}),
            "explain": await client.call_tool("explain_run", {"run_id": run.pk}),
            "stuck": await client.call_tool("stuck", {}),
            "search": await client.call_tool("search_runs", {"status": "paused"}),
        }

    got = stdio("viewer", session)
    for tool, result in got.items():
        text = result.content[0].text
        assert password not in text and rw.TOKEN not in text, tool
        assert "[redacted]" in text, tool
    shown = answer(got["run"])
    (failure,) = shown["errors"]
    assert failure["error_message"] == (
        "login as ada refused: [redacted] is wrong (smtp://mailer:[redacted]@mail.example.com, token=[redacted])"
    )
    paused = [event for event in shown["events"] if event["event"] == "paused"]
    assert paused and "[redacted] is wrong" in json.dumps(paused[0]["details"])
    assert "login as ada refused: [redacted] is wrong" in answer(got["explain"])["explanation"][0]
    (row,) = answer(got["stuck"])["paused"]["rows"]
    assert "login as ada refused: [redacted] is wrong" in row["paused_reason"]


# --- the user is read at every call; a legacy client's actor ------------------------------------------


def _in_thread(work: Callable[[], Any]) -> Any:
    """Run ORM work from inside the client's event loop (the ORM refuses async contexts)."""

    def run() -> Any:
        try:
            return work()
        finally:
            connection.close()

    return anyio.to_thread.run_sync(run)


def test_a_removed_permission_or_a_deactivated_user_takes_effect_at_the_next_call(users):
    run = run_workflow(wf.Failing.start())
    operator = users["operator"]
    change = Permission.objects.get(content_type__app_label="pgflow", codename="change_workflowrun")

    async def session(client: Client) -> dict[str, Any]:
        got = {"before": await client.call_tool("resume_run", {"run_id": run.pk})}
        await _in_thread(lambda: User.objects.get(pk=operator.pk).user_permissions.remove(change))
        got["without_change"] = await client.call_tool("resume_run", {"run_id": run.pk, "dry_run": False})
        got["still_views"] = await client.call_tool("search_runs", {})
        await _in_thread(lambda: User.objects.filter(pk=operator.pk).update(is_active=False))
        got["inactive"] = await client.call_tool("search_runs", {})
        return got

    got = stdio("operator", session)
    assert answer(got["before"])["dry_run"] is True
    assert "lacks the pgflow.change_workflowrun permission" in error(got["without_change"])
    assert answer(got["still_views"])["count"] == 1
    assert "no longer exists or is inactive" in error(got["inactive"])
    run.refresh_from_db()
    assert run.status == "paused" and not run.events.filter(event="resumed").exists()


def test_http_a_legacy_client_sends_no_client_info_so_its_actions_name_the_token(http_server, users):
    run = run_workflow(wf.Failing.start())
    _, secret = tokens.issue(users["operator"], "ops-bot")
    got = http(
        http_server,
        secret,
        lambda client: client.call_tool("skip_step", {"run_id": run.pk, "dry_run": False}),
        mode="legacy",
    )
    assert answer(got)["status"] == "finished"
    # Each legacy call is a stateless exchange with no initialize, hence no clientInfo.name.
    assert Event.objects.get(run=run, event="skipped").actor == "agent:ops-bot for user:operator"
