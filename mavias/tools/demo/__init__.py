"""The demo (`mavias demo`): the nightly pipeline end to end on one machine, offline, in minutes on two CPU cores.

1. generates synthetic-scenes and splits its train/val images into two nightly partitions by sample, its test
   split being the fixed evaluation set ``evaluation/v1``;
2. starts a local S3-compatible server (moto_server, a subprocess on 127.0.0.1) and an SMTP server (aiosmtpd,
   every message saved as ``.eml``), and uploads the evaluation set and the first partition;
3. runs the ``mavias_nightly`` DAG with ``airflow dags test`` (SQLite metadata DB, ``AIRFLOW_HOME`` in the work
   folder, examples off), uploads the second partition, runs the second night;
4. prints the reports, the promoted ONNX model (and a local copy), the registry, and what night 2 cost against
   night 1: discovery is incremental, so night 2 tags, judges and encodes only what is new;
5. starts the model server on the promoted model for a moment and prints one real inference round trip.
"""
