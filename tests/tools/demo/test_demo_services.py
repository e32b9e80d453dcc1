"""The demo's S3-compatible server (moto_server with its module list read once) serves S3 on 127.0.0.1."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from mavias.storage.s3 import make_s3_client
from mavias.tools.demo.services import demo_s3_settings, moto_server


def test_the_demos_s3_server_stores_lists_and_returns_objects(tmp_path):
    with moto_server(tmp_path / "moto.log") as endpoint:
        assert endpoint.startswith("http://127.0.0.1:")
        client = make_s3_client(demo_s3_settings("demo-bucket", endpoint))
        client.create_bucket(Bucket="demo-bucket")
        for i in range(3):  # more than one request after the first, which reads the module list
            client.put_object(Bucket="demo-bucket", Key=f"incoming/{i}.png", Body=bytes([i]) * 10)
        keys = [o["Key"] for o in client.list_objects_v2(Bucket="demo-bucket", Prefix="incoming/")["Contents"]]
        assert keys == ["incoming/0.png", "incoming/1.png", "incoming/2.png"]
        assert client.get_object(Bucket="demo-bucket", Key="incoming/2.png")["Body"].read() == b"\x02" * 10
        with pytest.raises(ClientError, match="NoSuchKey"):
            client.get_object(Bucket="demo-bucket", Key="missing.png")
