import pytest

from mavias.core.encode.openclip import OpenClip


@pytest.fixture(scope="session")
def clip() -> OpenClip:
    return OpenClip("ViT-S-32", None, device="cpu")  # the smallest architecture in open_clip's configs, random init
