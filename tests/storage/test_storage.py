"""Storage against a real moto_server: partitions, pulls, the processed ledger, retries, credential hygiene."""

from __future__ import annotations

import logging
import os
import threading
import time

import pandas as pd
import pytest
from botocore.exceptions import ClientError
from pydantic import SecretStr, ValidationError

from mavias.core.manifest import ManifestError
from mavias.ops.nightly import pull
from mavias.ops.nightly.incoming import ProcessedLedger, list_partitions
from mavias.ops.nightly.pull import PULL_JOURNAL, pull_partition
from mavias.storage.s3 import S3Settings, StorageDeadline, load_settings, make_s3_client, retrying
from tests.support.s3server import (  # noqa: F401 - fixtures
    faulty_proxy,
    moto_endpoint,
    s3_client,
    s3_settings,
    seed_partition,
)


def test_settings_from_yaml_overridden_by_env(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("s3:\n  bucket: from-yaml\n  region: eu-west-1\n  incoming_prefix: /landing\n")
    settings = load_settings(config, {"MAVIAS_S3_BUCKET": "from-env", "MAVIAS_S3_MAX_ATTEMPTS": "7"})
    assert (settings.bucket, settings.region, settings.max_attempts) == ("from-env", "eu-west-1", 7)
    assert settings.incoming_prefix == "landing/"


def test_lists_only_partitions_with_a_manifest(s3_client, s3_settings):
    seed_partition(s3_client, s3_settings, "2024-05-02", ["cat"], manifest_format="csv")
    seed_partition(s3_client, s3_settings, "2024-05-01", ["cat", "dog"])
    s3_client.put_object(Bucket=s3_settings.bucket, Key="incoming/2024-05-03/images/0000.png", Body=b"uploading")
    assert list_partitions(s3_client, s3_settings) == ["2024-05-01", "2024-05-02"]


def test_a_folder_name_with_a_trailing_newline_is_unsafe():
    """A regex ending in $ also matches before a final newline: such a folder must be ignored, never a partition."""
    from mavias.ops.nightly.incoming import unsafe_names
    from mavias.storage.names import UnsafeName, check_name

    assert unsafe_names(["p1\n", "p1", "../p2", ".hidden"]) == ["../p2", ".hidden", "p1\n"]
    with pytest.raises(UnsafeName):
        check_name("partition", "p1\n")


def test_objects_in_the_ledger_that_mark_no_partition_are_left_out(s3_client, s3_settings, caplog):
    """A backup folder or a stray file under the ledger's prefix must not become a partition name every night."""
    ledger = ProcessedLedger(s3_client, s3_settings)
    ledger.mark_processed("p1")
    for stray in ("backup/p1.json", "notes.txt"):
        s3_client.put_object(Bucket=s3_settings.bucket, Key=ledger.processed_prefix + stray, Body=b"{}")
    with caplog.at_level(logging.WARNING):
        assert ledger.processed() == {"p1"}
    assert "backup/p1.json" in caplog.text and "notes.txt" in caplog.text


def test_pull_is_idempotent_and_repairs_changed_files(s3_client, s3_settings, tmp_path):
    manifest = seed_partition(s3_client, s3_settings, "p1", ["cat", "dog", "cat"], manifest_format="csv")
    manifest_path = pull_partition(s3_client, s3_settings, "p1", tmp_path)
    assert manifest_path == tmp_path / "manifest.csv"
    images = [tmp_path / uri for uri in manifest["uri"]]
    assert all(p.is_file() for p in images)
    stamps = {p: p.stat().st_mtime_ns for p in images}
    images[1].write_bytes(b"damaged")

    pull_partition(s3_client, s3_settings, "p1", tmp_path)

    assert images[1].read_bytes() != b"damaged"
    assert all(p.stat().st_mtime_ns == stamps[p] for p in (images[0], images[2]))


def test_pull_refuses_uris_outside_the_partition(s3_client, s3_settings, tmp_path):
    rows = {"sample_id": ["a"], "uri": ["../other/secret.png"], "label": ["cat"], "split": ["train"]}
    key = "incoming/p1/manifest.parquet"
    s3_client.put_object(Bucket=s3_settings.bucket, Key=key, Body=pd.DataFrame(rows).to_parquet(index=False))
    with pytest.raises(ManifestError, match="relative to the partition"):
        pull_partition(s3_client, s3_settings, "p1", tmp_path)


def test_rerun_skips_processed_and_quarantined_partitions(s3_client, s3_settings):
    for partition in ("p1", "p2", "p3"):
        seed_partition(s3_client, s3_settings, partition, ["cat"])
    ledger = ProcessedLedger(s3_client, s3_settings)
    assert ledger.new_partitions() == ["p1", "p2", "p3"]

    assert ledger.mark_processed("p1", {"run_id": "night-1"})
    assert not ledger.mark_processed("p1", {"run_id": "night-2"})
    ledger.mark_quarantined("p2", {"success": False})

    rerun = ProcessedLedger(make_s3_client(s3_settings), s3_settings)
    assert rerun.new_partitions() == ["p3"]
    assert rerun.processed() == {"p1"} and rerun.quarantined() == {"p2"}


def test_transient_errors_are_retried(s3_client, s3_settings, faulty_proxy, tmp_path):
    seed_partition(s3_client, s3_settings, "p1", ["cat", "dog"])
    proxied = s3_settings.model_copy(update={"endpoint_url": faulty_proxy.endpoint_url})
    client = make_s3_client(proxied)

    faulty_proxy.fail_next(2)
    assert list_partitions(client, proxied) == ["p1"]
    faulty_proxy.fail_next(2, status=500)
    pull_partition(client, proxied, "p1", tmp_path)

    assert faulty_proxy.failures_served == 4
    assert len(list(tmp_path.rglob("*.png"))) == 2


def test_retries_are_bounded(s3_settings, faulty_proxy):
    proxied = s3_settings.model_copy(update={"endpoint_url": faulty_proxy.endpoint_url, "max_attempts": 2})
    faulty_proxy.fail_next(5)
    with pytest.raises(ClientError, match="SlowDown"):
        list_partitions(make_s3_client(proxied), proxied)
    assert faulty_proxy.failures_served == 2


def test_a_step_that_fails_after_longer_than_the_outage_budget_still_gets_its_retry():
    started = []

    def long_step() -> str:  # a big pull: the connection drops after longer than the budget
        started.append(time.monotonic())
        if len(started) == 1:
            time.sleep(0.4)
            raise ConnectionError("connection reset")
        return "pulled"

    assert retrying(lambda err: isinstance(err, ConnectionError), 0.2)(long_step) == "pulled"
    assert len(started) == 2


def test_outage_retries_stop_once_the_failures_have_lasted_their_budget():
    started = []

    def failing() -> None:
        started.append(time.monotonic())
        raise ConnectionError("connection refused")

    with pytest.raises(ConnectionError):
        retrying(lambda err: isinstance(err, ConnectionError), 0.3)(failing)
    assert len(started) == 2 and started[1] - started[0] >= 0.3  # one backoff of 0.5 s, then the budget is spent


def test_a_step_deadline_counts_only_the_time_spent_waiting_on_the_store(s3_client, s3_settings, faulty_proxy):
    seed_partition(s3_client, s3_settings, "p1", ["cat", "dog"])
    proxied = s3_settings.model_copy(update={"endpoint_url": faulty_proxy.endpoint_url, "max_attempts": 3})
    client = make_s3_client(proxied, deadline_s=1.0, step="evaluate")
    assert list_partitions(client, proxied) == ["p1"]
    time.sleep(1.5)  # the step's own work (scoring models, decoding images) between two requests
    assert list_partitions(client, proxied) == ["p1"]  # still within the deadline: the store answered at once
    faulty_proxy.stall_next(10, 5.0)
    started = time.monotonic()
    with pytest.raises(StorageDeadline, match="evaluate step's deadline of 1 s"):
        list_partitions(client, proxied)
    assert time.monotonic() - started < 4  # one read timeout (the deadline), then the next attempt is refused


def test_a_store_that_trickles_a_body_is_stopped_at_the_step_deadline(s3_settings, tmp_path):
    """The headers come at once, then the body crawls (each read within the read timeout): the time spent reading it
    is time waited on the store, and the step stops at its deadline instead of never (a real server on loopback)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from mavias.storage.s3 import download_file

    class Trickle(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Length", str(20 << 20))
            self.send_header("ETag", '"e"')
            self.end_headers()
            try:
                for _ in range(20):
                    time.sleep(0.3)
                    self.wfile.write(b"x" * (1 << 20))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        trickling = s3_settings.model_copy(update={"endpoint_url": f"http://127.0.0.1:{server.server_port}"})
        client = make_s3_client(trickling, deadline_s=1.0, step="pull")
        started = time.monotonic()
        with pytest.raises(StorageDeadline, match=r"pull step's deadline of 1 s \(at reading a response body"):
            download_file(client, trickling, "k", tmp_path / "k")
        assert time.monotonic() - started < 4 and not (tmp_path / "k").exists()
    finally:
        server.shutdown()


def test_a_pull_cut_off_part_way_resumes_with_the_files_it_lacks(s3_client, s3_settings, faulty_proxy, tmp_path):
    manifest = seed_partition(s3_client, s3_settings, "big", ["cat", "dog"] * 5)
    proxied = s3_settings.model_copy(update={"endpoint_url": faulty_proxy.endpoint_url, "max_attempts": 1,
                                             "read_timeout_s": 1.0, "max_workers": 1})
    last = sorted(manifest["uri"])[-1]
    faulty_proxy.stall_paths(last.rsplit("/", 1)[-1], 3.0)  # the store hangs on the last image
    with pytest.raises(Exception):  # noqa: B017, PT011 - a read timeout, whatever botocore calls it
        pull_partition(make_s3_client(proxied), proxied, "big", tmp_path)
    landed = {p.name for p in tmp_path.rglob("*.png")}
    assert len(landed) == len(manifest) - 1
    faulty_proxy.stall_paths(None)
    seen = faulty_proxy.requests_seen
    pull_partition(make_s3_client(proxied), proxied, "big", tmp_path)
    assert faulty_proxy.requests_seen - seen <= 3  # the listings and the one missing image, not all eleven files
    assert len(list(tmp_path.rglob("*.png"))) == len(manifest)
    seen = faulty_proxy.requests_seen
    pull_partition(make_s3_client(proxied), proxied, "big", tmp_path)
    assert faulty_proxy.requests_seen - seen == 2  # complete: only the listings (the manifest's, then the files')


def test_a_pull_journals_its_files_only_after_one_sync_per_batch_made_them_durable(s3_client, s3_settings, tmp_path,
                                                                                    monkeypatch):
    manifest = seed_partition(s3_client, s3_settings, "batched", ["cat", "dog"] * 5)
    monkeypatch.setattr(pull, "JOURNAL_BATCH", 4)
    journal, fsyncs, at_sync = tmp_path / PULL_JOURNAL, [], []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(os, "sync", lambda: at_sync.append(
        (len(journal.read_text().splitlines()) if journal.exists() else 0, len(list(tmp_path.rglob("*.png"))))))
    pull_partition(s3_client, s3_settings, "batched", tmp_path)
    assert len(list(tmp_path.rglob("*.png"))) == len(manifest)
    assert len(at_sync) == 3  # the manifest and ten images: batches of 4, 4 and the last 3
    assert all(journaled < landed for journaled, landed in at_sync)  # each sync covers files not journaled yet
    assert len(fsyncs) <= 2 and not journal.exists()  # only the completed pull's ETags file (and its folder)


@pytest.mark.slow
def test_a_pull_downloads_while_the_listing_streams_by(s3_client, s3_settings, faulty_proxy, tmp_path):
    """A partition's listing is never held whole: its first files land before its second page is asked for."""
    manifest = seed_partition(s3_client, s3_settings, "paged", ["cat", "dog"] * 550)  # 1,101 keys: two pages
    proxied = s3_settings.model_copy(update={"endpoint_url": faulty_proxy.endpoint_url, "max_workers": 2})
    pull_partition(make_s3_client(proxied), proxied, "paged", tmp_path)
    assert len(list(tmp_path.rglob("*.png"))) == len(manifest)
    order = [("page 2" if "continuation-token" in path else "list") if "list-type=2" in path else "get"
             for method, path in faulty_proxy.requests if method == "GET"]
    assert order.count("page 2") == 1 and order.index("get", order.index("list", 1)) < order.index("page 2")


def test_credentials_never_logged_or_shown(moto_endpoint, caplog):
    access_key, secret = "AKIAMAVIASTESTKEY01", "mavias-secret-do-not-log"
    settings = S3Settings(
        bucket="creds-check",
        endpoint_url=moto_endpoint,
        access_key_id=SecretStr(access_key),
        secret_access_key=SecretStr(secret),
    )
    caplog.set_level(logging.DEBUG)
    client = make_s3_client(settings)
    client.create_bucket(Bucket=settings.bucket)
    ledger = ProcessedLedger(client, settings)
    ledger.mark_processed("p1")
    ledger.new_partitions()

    with pytest.raises(ValidationError) as misspelt:
        S3Settings(bucket="b", secret_key=secret)

    shown = [repr(settings), str(settings), settings.model_dump_json(), str(misspelt.value)]
    assert not any(secret in text or access_key in text for text in shown)
    assert secret not in caplog.text  # botocore's own DEBUG logs included
    assert not any(access_key in r.getMessage() for r in caplog.records if r.name.startswith("mavias"))


class _CountedItems:
    """A million file names drawn one at a time, recording how many were drawn before each finished."""

    def __init__(self, n: int):
        self.n, self.drawn, self.finished, self.most_ahead = n, 0, 0, 0
        self.lock = threading.Lock()

    def finish(self) -> None:
        with self.lock:
            self.finished += 1

    def __len__(self) -> int:
        return self.n

    def __iter__(self):  # noqa: ANN204
        for i in range(self.n):
            with self.lock:
                self.drawn += 1
                self.most_ahead = max(self.most_ahead, self.drawn - self.finished)
            yield f"file-{i}"


def test_a_huge_partition_is_submitted_a_few_files_per_worker_at_a_time_and_stops_at_the_first_error() -> None:
    from mavias.storage.parallel import IN_FLIGHT_PER_WORKER, run_parallel

    items = _CountedItems(20_000)

    def fetch(name: str) -> None:
        items.finish()

    run_parallel(fetch, items, workers=4, desc="pull")
    assert items.finished == 20_000 and items.most_ahead <= 4 * IN_FLIGHT_PER_WORKER + 1
    failing = _CountedItems(1_000_000)

    def broken(name: str) -> None:
        failing.finish()
        if name == "file-100":
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        run_parallel(broken, failing, workers=4, desc="pull")
    assert failing.drawn < 200  # nothing like a million futures were made
