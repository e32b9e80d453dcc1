"""Defaults of the OpenCLIP tagger and text encoder, importable without open_clip (CLI option defaults)."""

OPENCLIP_MODEL = "ViT-L-14"  # the paper's CLIP ViT-L/14
OPENCLIP_PRETRAINED = "openai"
TAG_THRESHOLD = 10.0  # x the uniform probability 1/|vocabulary|; untuned: no real weights are reachable here
TAG_TOP_K = 20
