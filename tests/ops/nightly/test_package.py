"""A night's package step run again (a retry, or the night cleared and rerun after a publish was cut off) keeps the
version folder it made from the same checkpoint, so the folder still matches what was uploaded of it."""

from mavias.ops.nightly.package import packaged_before, write_record


def test_a_folder_packaged_from_the_same_checkpoint_is_kept_and_any_other_packaged_again(tmp_path):
    checkpoint, folder, record = tmp_path / "best.pt", tmp_path / "v1", tmp_path / "v1.packaged.json"
    checkpoint.write_bytes(b"weights of tonight's candidate")
    folder.mkdir()
    packaged = {"version": "v1", "dir": str(folder), "onnx": str(folder / "model.onnx")}
    assert packaged_before(record, checkpoint) is None  # nothing packaged yet

    write_record(record, checkpoint, packaged)
    assert packaged_before(record, checkpoint) == packaged

    folder.rmdir()  # retention removed it
    assert packaged_before(record, checkpoint) is None
    folder.mkdir()
    checkpoint.write_bytes(b"weights of a candidate trained again")
    assert packaged_before(record, checkpoint) is None
    for damaged in ("", "[]", '{"packaged": {}}'):
        record.write_text(damaged)
        assert packaged_before(record, checkpoint) is None
