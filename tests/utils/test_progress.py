import io

import pytest

from mavias.utils.progress import StepProgress, progress_bar, progress_line


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_plain_lines_not_one_per_update():
    log = io.StringIO()
    for _ in progress_bar(range(20_000), desc="work", file=log):
        pass
    assert "\r" not in log.getvalue() and log.getvalue().splitlines() == [log.getvalue().strip()]
    assert "20000/20000" in log.getvalue()


def test_a_transient_bar_leaves_no_blank_line_in_a_log():
    log = io.StringIO()
    for _ in progress_bar(range(500), desc="epoch 1/3", file=log, leave=False):
        pass
    progress_line("epoch 1/3: loss 0.5", file=log)
    assert log.getvalue() == "epoch 1/3: loss 0.5\n"


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


def test_step_progress_counts_finished_steps_and_names_the_one_under_way():
    log = io.StringIO()
    steps = StepProgress(3, desc="bench", unit="training", file=log)
    for label in ("seed 0: ERM", "seed 0: LfF"):
        with steps.step(label):
            pass
    with pytest.raises(RuntimeError), steps.step("seed 0: MAVias"):
        raise RuntimeError("interrupted")
    steps.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and all(line.startswith("bench:") for line in lines)
    assert "seed 0: ERM" in lines[0]  # one line as each step starts
    assert "2/3" in lines[-1] and "seed 0: MAVias" in lines[-1]  # the failed step is named, not counted
    assert list(steps.seconds) == ["seed 0: ERM", "seed 0: LfF"] and all(s >= 0 for s in steps.seconds.values())
