"""Defaults of the OpenCLIP model shared by the text encoder and the tagger, importable without open_clip (CLI
option defaults)."""

OPENCLIP_MODEL = "ViT-L-14"  # the paper's CLIP ViT-L/14
OPENCLIP_PRETRAINED = "openai"
ENCODE_MODES = ("collective", "separate")  # one prompt of all tags, or the mean of one prompt per tag
