"""The demo prints one line per epoch of every training while a night runs: the lines the trainer writes into the
night's log are the lines the demo's reader picks up."""

from mavias.core.train.trainer import epoch_line
from mavias.tools.demo.services import EPOCH_LINE

ROW = {"epoch": 7, "train_loss": 0.4321, "val_acc": 0.8125, "lr": 0.0123, "seconds": 4.2}


def test_the_trainers_epoch_lines_are_read_from_a_night_log():
    line = epoch_line("mavias", 100, ROW)
    logged = f"{line}\n"  # as a task's stderr reaches the output of `airflow dags test`
    found = EPOCH_LINE.search(logged)
    assert found and found.group(1).startswith("mavias epoch 7/100: ") and "val_acc 0.8125" in found.group(1)
    stop = "erm: stopped after epoch 40 of 100: no better val_acc in its last 12 validations"
    assert EPOCH_LINE.search(f"[info] {stop}\n").group(2) == stop


def test_other_log_lines_are_not_epochs():
    for line in ("recipe: epochs = 100 (about 3000 steps)", "[DAG TEST] starting task_id=train_reference map_index=-1",
                 "tagging: 4 shard(s) to tag"):
        assert EPOCH_LINE.search(line) is None
