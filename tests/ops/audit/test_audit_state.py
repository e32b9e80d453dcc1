"""The audit folder's state: what a second run keeps and what it does again."""

import pytest

from mavias.errors import UserError
from mavias.ops.audit.options import AuditPaths, AuditState


def test_a_changed_review_undoes_the_judging_and_mavias_only(tmp_path):
    paths = AuditPaths(tmp_path / "audit")
    state = AuditState(paths, {"path": "/photos"})
    state.follow_review("abc", paths)  # a first run with a review: nothing to undo
    for step in ("import", "discover"):
        state.finish(step, {"warnings": []})
    for run in (paths.mavias, paths.reference):
        run.mkdir(parents=True)
        (run / "last.pt").write_bytes(b"a run")
    state.follow_review("abc", paths)  # the same review again: kept
    assert state.done("discover") is not None and (paths.mavias / "last.pt").is_file()
    state.follow_review(None, paths)  # the review dropped: judged again, MAVias trained again, the reference kept
    reread = AuditState(paths, {"path": "/photos"})
    assert reread.done("discover") is None and reread.done("import") is not None
    assert not paths.mavias.exists() and (paths.reference / "last.pt").is_file()
    assert reread.document["review"] is None


def test_other_data_in_a_folder_only_imported_starts_again_without_the_runs_of_the_first(tmp_path):
    """A run killed after a review change keeps its reference; other data given to that folder must not reuse it."""
    paths = AuditPaths(tmp_path / "audit")
    state = AuditState(paths, {"path": "/photos"})
    state.finish("import", {"warnings": []})
    for run in (paths.reference, paths.mavias, paths.model.parent):
        run.mkdir(parents=True)
        (run / "last.pt").write_bytes(b"a run of /photos")
    other = AuditState(paths, {"path": "/other-photos"})
    assert other.done("import") is None
    assert not any(run.exists() for run in (paths.reference, paths.mavias, paths.model.parent))
    # the other data's import cut off: the first data's import is not taken as done when it comes back
    assert AuditState(paths, {"path": "/photos"}).done("import") is None


@pytest.mark.parametrize("record", [b"", b"[]", b'{"done": {}}', b'{"inputs": {}, "done": []}', b"\xff"])
def test_a_damaged_audit_record_is_one_line_saying_what_to_do(tmp_path, record):
    paths = AuditPaths(tmp_path / "audit")
    paths.root.mkdir()
    paths.state.write_bytes(record)
    with pytest.raises(UserError, match="is not an audit's record .* delete .* or pass another --out"):
        AuditState(paths, {"path": "/photos"})
