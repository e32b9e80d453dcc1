"""The benches' benchmark list: what each scores as its true shortcuts, and which are held out."""

import pytest

from mavias.core.synthetic import SyntheticScenesConfig, ThreeCueScenesConfig, make_synthetic_scenes
from mavias.errors import UserError
from mavias.tools.bench.suite import choose, data_dir


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


def test_a_share_halves_the_training_and_validation_images_in_a_folder_of_its_own(tmp_path):
    whole, = choose(["synthetic-scenes"])
    half, = choose(["synthetic-scenes"], share=0.5)
    assert (half.config.n_train, half.config.n_val) == (whole.config.n_train // 2, whole.config.n_val // 2)
    assert half.config.model_copy(update={"n_train": whole.config.n_train, "n_val": whole.config.n_val}) == whole.config
    assert half.slug == "synthetic-scenes-share0.5" and whole.slug == "synthetic-scenes"
    assert data_dir(tmp_path, half) != data_dir(tmp_path, whole)
    assert data_dir(tmp_path, choose(["synthetic-scenes"], share=1.0)[0]) == data_dir(tmp_path, whole)


def test_a_share_outside_zero_to_one_says_what_to_give():
    with pytest.raises(UserError, match=r"give a share in \(0, 1\]"):
        choose(["synthetic-scenes"], share=1.5)
