import io

from rich.table import Table

from mavias.utils.console import LOG_WIDTH, make_console


def _wide_table() -> Table:
    table = Table(title="bench")
    for name in ("method", "selection", "WG acc", "balanced acc (mean over groups)", "open-set WG", "test acc",
                 "BG gap", "CoObj gap", "s/epoch"):
        table.add_column(name)
    table.add_row("GroupDRO (oracle)", "val_robust", *["55.4 ± 5.3"] * 7)
    return table


def test_tables_in_logs_are_not_cut_to_80_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()  # not a terminal, like an Airflow task log
    console = make_console(file=out)
    console.print(_wide_table())
    assert console.width == LOG_WIDTH
    assert "…" not in out.getvalue() and "GroupDRO (oracle)" in out.getvalue()


def test_columns_in_the_environment_still_decide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert make_console(file=io.StringIO()).width == 100
