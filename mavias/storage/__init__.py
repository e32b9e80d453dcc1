"""Object storage (S3-compatible), shared by the importers, the pipeline and the model server."""
