"""The conditional-write probe against real servers on loopback: moto_server honours If-None-Match and If-Match, a
tiny store that ignores them is named with what to do, and the probe object never stays behind."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from mavias.storage.conditional import conditional_write_problem
from mavias.storage.s3 import S3Settings, list_objects, make_s3_client
from tests.support.s3server import (  # noqa: F401 - fixtures
    TEST_CREDENTIALS,
    faulty_proxy,
    moto_endpoint,
    s3_client,
    s3_settings,
)
from tests.support.unconditional_store import UnconditionalStore, unconditional_store  # noqa: F401 - a fixture


def test_moto_honours_conditional_writes_and_no_probe_stays_behind(s3_client, s3_settings):
    assert conditional_write_problem(s3_client, s3_settings) is None
    assert list(list_objects(s3_client, s3_settings, "")) == []


@pytest.mark.parametrize(("unconditional_store", "ignored"), [(False, "If-None-Match and If-Match"),
                                                               (True, "If-Match")], indirect=["unconditional_store"])
def test_a_store_that_ignores_conditions_is_named_with_what_to_do(unconditional_store: UnconditionalStore, ignored):
    settings = S3Settings(bucket="night", endpoint_url=unconditional_store.endpoint_url, state_prefix="ops/state",
                          **TEST_CREDENTIALS)

    problem = conditional_write_problem(make_s3_client(settings), settings)

    assert problem.startswith(f"the store at {unconditional_store.endpoint_url} (bucket night) ignores or does not "
                              f"support {ignored}: ")
    assert "production pointer are not safe there; use a store that supports conditional writes" in problem
    assert unconditional_store.written and all(
        path.startswith("/night/ops/state/probe/conditional-") for path in unconditional_store.written)
    assert unconditional_store.objects == {}


def test_a_transient_error_propagates_instead_of_passing_the_check(s3_settings, faulty_proxy):
    proxied = s3_settings.model_copy(update={"endpoint_url": faulty_proxy.endpoint_url, "max_attempts": 1})
    faulty_proxy.fail_next(1, 503, method="DELETE")

    with pytest.raises(ClientError, match="SlowDown"):
        conditional_write_problem(make_s3_client(proxied), proxied)


def test_a_store_that_does_not_implement_conditional_writes_is_named_at_once(s3_settings, faulty_proxy):
    """A 501 to If-None-Match is no outage: named in one line, not retried for minutes and then raised."""
    proxied = s3_settings.model_copy(update={"endpoint_url": faulty_proxy.endpoint_url})
    faulty_proxy.fail_next(1, 501, method="PUT")

    problem = conditional_write_problem(make_s3_client(proxied), proxied)

    assert "ignores or does not support If-None-Match: " in problem and faulty_proxy.failures_served == 1
