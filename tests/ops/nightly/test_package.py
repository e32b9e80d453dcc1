"""A night's package step run again (a retry, or the night cleared and rerun after a publish was cut off) keeps the
version folder it made from the same checkpoint, metrics and gates, so the folder still matches what was uploaded of
it."""

import json

from mavias.ops.nightly.package import packaged_before
from mavias.utils.disk import sha256_file

INPUTS = {"checkpoint": "c0ffee", "metrics": "5eed", "gates": '{"passed": true}'}


def test_a_folder_packaged_from_the_same_inputs_is_kept_and_any_other_packaged_again(tmp_path):
    onnx, record = tmp_path / "v1" / "model.onnx", tmp_path / "v1.packaged.json"
    onnx.parent.mkdir()
    onnx.write_bytes(b"an ONNX graph")
    packaged = {"version": "v1", "dir": str(onnx.parent), "onnx": str(onnx), "onnx_sha256": sha256_file(onnx)}
    assert packaged_before(record, INPUTS) is None  # nothing packaged yet

    record.write_text(json.dumps({"inputs": INPUTS, "packaged": packaged}))  # as package() writes it, last
    assert packaged_before(record, INPUTS) == packaged
    for changed in ({"checkpoint": "retrained"}, {"metrics": "evaluated again"}, {"gates": '{"passed": false}'}):
        assert packaged_before(record, INPUTS | changed) is None
    onnx.write_bytes(b"a graph cut short")
    assert packaged_before(record, INPUTS) is None
    onnx.unlink()  # retention removed the folder
    assert packaged_before(record, INPUTS) is None
    for damaged in ("", "[]", '{"packaged": {}}'):
        record.write_text(damaged)
        assert packaged_before(record, INPUTS) is None
