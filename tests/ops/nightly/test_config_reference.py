"""docs/nightly-config.md is the nightly config as the models define it, and a config mistake names the setting,
what it takes and where to fix it."""

from pathlib import Path

import pytest

from mavias.ops.nightly.config import NightlyConfigError, load_nightly_config
from mavias.ops.nightly.reference import reference_markdown

PAGE = Path(__file__).resolve().parents[3] / "docs" / "nightly-config.md"


def test_the_reference_page_is_current():
    assert PAGE.read_text() == reference_markdown(), (
        "regenerate it: python -m mavias.ops.nightly.reference > docs/nightly-config.md")


def test_every_setting_is_described():
    rows = [line for line in reference_markdown().splitlines() if line.startswith("| `")]
    assert len(rows) > 50 and all(not row.rstrip().endswith("|  |") for row in rows)


def test_a_bad_value_names_the_setting_what_it_takes_and_where_to_fix_it(tmp_path):
    path = tmp_path / "nightly.yaml"
    path.write_text("model_name: m\nworkspace: w\ns3: {bucket: b}\nairflow: {retries: many}\nreport: {latncy_runs: 3}\n")
    with pytest.raises(NightlyConfigError) as caught:
        load_nightly_config(path, environ={})
    message = str(caught.value)
    assert "airflow.retries: Input should be a valid integer" in message and "it takes int: retries" in message
    assert "report.latncy_runs: Extra inputs are not permitted; did you mean report.latency_runs?" in message
    assert f"fix it in {path}" in message and "errors.pydantic.dev" not in message and "\n" not in message
