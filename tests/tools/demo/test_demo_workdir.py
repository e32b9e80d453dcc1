"""The demo empties its pipeline folders on every run: it does so only in a folder it made, never in a user's."""

import pytest

from mavias.errors import UserError
from mavias.tools.demo import run as demo


def test_a_folder_of_the_users_is_refused_before_anything_is_deleted(tmp_path, monkeypatch):
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "keep.txt").write_text("the user's")
    monkeypatch.setattr(demo, "make_demo_data", lambda *a, **k: pytest.fail("the demo went on"))
    with pytest.raises(UserError, match="is no demo folder"):
        demo.run_demo(tmp_path)
    assert (tmp_path / "workspace" / "keep.txt").read_text() == "the user's"


@pytest.mark.parametrize("made", ["new", "marked", "earlier demo"])
def test_a_new_folder_or_one_the_demo_made_is_taken(tmp_path, made):
    workdir = tmp_path / "demo"
    if made == "marked":
        workdir.mkdir()
        (workdir / demo.DEMO_MARKER).touch()
        (workdir / "workspace").mkdir()
    elif made == "earlier demo":
        (workdir / "data").mkdir(parents=True)
        (workdir / "nightly.yaml").write_text("model_name: m\n")
    demo._claim(workdir)
    assert (workdir / demo.DEMO_MARKER).exists()
