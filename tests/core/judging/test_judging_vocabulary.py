import pytest

from mavias.core.tagging.vocabulary import VocabularyError, load_vocabulary


def test_the_shipped_vocabulary_is_large_clean_and_deduplicated():
    vocabulary = load_vocabulary()
    assert len(vocabulary) >= 3000
    assert len(set(vocabulary)) == len(vocabulary)
    assert all(tag == tag.strip().lower() and "  " not in tag for tag in vocabulary)
    for concept in ("dog", "wheel", "forest", "red", "wood", "striped", "rain", "sunset", "running", "beard"):
        assert concept in vocabulary


def test_a_user_vocabulary_is_normalised_and_deduplicated(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text("# my tags\nRed  Car\nred car\n\nsky\n")
    assert load_vocabulary(path) == ["red car", "sky"]


@pytest.mark.parametrize("content", ["", "# only a note\n", "a, b\n", "x" * 65 + "\n"])
def test_unusable_vocabularies_are_rejected(tmp_path, content):
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(VocabularyError):
        load_vocabulary(path)
