"""The archive's names and index entries (pgflow.core.archiving), without a database: a batch's
file is named by its ids alone, so writing it again writes over it; an index names the file it
sits beside; a run held twice counts once, its newest copy."""

from __future__ import annotations

from pgflow.core import archiving

ARCHIVE = archiving.parse({"STORAGE": "s3", "PREFIX": "runs"})


def test_a_batch_file_is_named_by_its_ids_alone():
    name = archiving.batch_file_name(ARCHIVE, "2026-10-23", [7, 3, 5])
    assert name == archiving.batch_file_name(ARCHIVE, "2026-10-23", [3, 5, 7, 5])
    assert name != archiving.batch_file_name(ARCHIVE, "2026-10-23", [3, 7])  # same range, other runs
    assert name.startswith("runs/2026-10-23/runs-3-7-") and name.endswith(".jsonl.gz")
    assert archiving.ids_of(name) == (3, 7)


def test_an_index_sits_beside_its_file_and_is_not_taken_for_one():
    name = archiving.batch_file_name(ARCHIVE, "2026-10-23", [3])
    index = archiving.index_name(name)
    assert index == name.removesuffix(".jsonl.gz") + ".index.json.gz"
    assert archiving.ids_of(index) is None


def test_an_entry_holds_the_searched_columns_and_its_file():
    run = {"id": 3, "key": "k", "workflow_class": "a.B", "attributes": {"plan": "gold"}, "status": "finished"}
    run |= {"finished_at": "2026-10-23T12:00:00Z", "input": {"big": "x" * 100}}
    assert archiving.entry(run, name="runs/x.jsonl.gz", archived_at=None) == {
        "id": 3,
        "key": "k",
        "workflow_class": "a.B",
        "attributes": {"plan": "gold"},
        "status": "finished",
        "finished_at": "2026-10-23T12:00:00Z",
        "object": "runs/x.jsonl.gz",
        "archived_at": None,
    }


def test_a_run_held_twice_counts_once_its_newest_copy():
    def at(run_id, name, archived_at, finished_at="2026-10-23T12:00:00Z"):
        return {"id": run_id, "object": name, "archived_at": archived_at, "finished_at": finished_at}

    kept = archiving.newest(
        [
            at(1, "old", "2026-11-01T00:00:00Z"),
            at(2, "old", "2026-11-01T00:00:00Z"),
            at(1, "new", "2026-11-02T00:00:00Z"),
            at(2, "legacy", None),  # written before archived_at was recorded: older than any that has it
            at(3, "restored-old", None, "2026-01-01T00:00:00Z"),
            at(3, "restored-new", None, "2026-03-01T00:00:00Z"),
        ]
    )
    assert [(each["id"], each["object"]) for each in kept] == [(1, "new"), (2, "old"), (3, "restored-new")]
