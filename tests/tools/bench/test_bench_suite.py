"""The benches' benchmark list: what each scores as its true shortcuts, and which are held out."""

from mavias.core.synthetic import SyntheticScenesConfig, ThreeCueScenesConfig, make_synthetic_scenes
from mavias.tools.bench.suite import choose


def test_three_cue_scenes_scores_background_co_object_and_colour_and_is_held_out(tmp_path):
    make_synthetic_scenes(tmp_path, ThreeCueScenesConfig(n_train=9, n_val=3, n_test_per_cell=1, image_size=32))
    bench, = choose(["three-cue-scenes"])
    assert bench.held_out
    assert bench.attrs == ["attr_bg_aligned", "attr_coobj_aligned", "attr_color_aligned"]
    assert bench.true_shortcuts(tmp_path)["fish"] == {"room", "floor", "wall", "lamp", "lampshade", "orange"}


def test_synthetic_scenes_scores_no_colour(tmp_path):
    make_synthetic_scenes(tmp_path, SyntheticScenesConfig(n_train=9, n_val=3, n_test_per_cell=1, image_size=32))
    bench, = choose(["synthetic-scenes"])
    assert bench.true_shortcuts(tmp_path)["car"] == {"street", "road", "asphalt", "traffic light"}
