"""Where a night's files live: names that cannot collide."""

import pytest

from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.layout import evaluation_partition
from mavias.storage.names import UnsafeName, check_name
from mavias.storage.s3 import S3Settings


def test_no_incoming_partition_can_share_the_evaluation_sets_discovery_folders(tmp_path):
    name = evaluation_partition(NightlyConfig(model_name="m", s3=S3Settings(bucket="b"), workspace=tmp_path))
    assert name.endswith("evaluation-v1")
    check_name("partition", name.removeprefix("_"))  # what a producer may call a partition ...
    with pytest.raises(UnsafeName):
        check_name("partition", name)  # ... is never the evaluation set's name


@pytest.mark.parametrize(("prefix", "folder"), [("", "v1/"), ("/", "v1/"), ("/sets/eval", "sets/eval/v1/")])
def test_an_evaluation_set_at_the_buckets_root_is_looked_up_without_a_leading_slash(tmp_path, monkeypatch, prefix,
                                                                                     folder):
    from mavias.ops.nightly import layout
    from mavias.ops.nightly.incoming import partition_prefix

    asked = []
    monkeypatch.setattr(layout, "pull_partition", lambda client, settings, name, local: asked.append(
        partition_prefix(settings, name)) or local)
    cfg = NightlyConfig(model_name="m", s3=S3Settings(bucket="b"), workspace=tmp_path, evaluation={"prefix": prefix})
    layout.pull_evaluation_set(cfg, client=None)
    assert asked == [folder]
