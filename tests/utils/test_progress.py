import io

from mavias.utils.progress import progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_few_lines_not_one_per_update():
    log = io.StringIO()
    for _ in progress_bar(range(20_000), desc="work", file=log):
        pass
    assert 1 <= log.getvalue().count("\r") <= 3 and "20000/20000" in log.getvalue()


def test_a_terminal_gets_a_live_bar():
    terminal = Terminal()
    bar = progress_bar(total=3, file=terminal, mininterval=0)
    for _ in range(3):
        bar.update()
    bar.close()
    assert terminal.getvalue().count("\r") >= 4


def test_disabled_writes_nothing():
    log = io.StringIO()
    assert list(progress_bar(range(3), enabled=False, file=log)) == [0, 1, 2] and log.getvalue() == ""
