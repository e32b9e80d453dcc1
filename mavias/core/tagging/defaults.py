"""Defaults of the OpenCLIP tagger, importable without open_clip (CLI option defaults); the model's own are in
:mod:`mavias.core.encode.defaults`."""

TAG_THRESHOLD = 10.0  # x the uniform probability 1/|vocabulary|; untuned: no real weights are reachable here
TAG_TOP_K = 20
DEFAULT_NUM_SHARDS = 8  # of a partition, each committed atomically
