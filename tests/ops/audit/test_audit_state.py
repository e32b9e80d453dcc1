"""The audit folder's state: what a second run keeps and what it does again."""

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
