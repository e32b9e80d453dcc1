"""The nightly flow as plain functions, one module per stage and one function per DAG task; the Airflow DAG
(``dags/mavias_nightly.py``) only wires them, and the library never imports Airflow.

    ingest        sense -> pull_and_validate -> (training_decision) ... record_processed
    tagging_plan  plan_tagging
    discover      tag_shard (mapped) -> discover
    dataset       prepare_dataset
    train         train_reference_model
    trial_plan    plan_trials
    train         run_trial (mapped) -> select_candidate
    evaluate      evaluate (then the quality_gates task: mavias.ops.gates)
    package       package
    release       publish -> promote (and point serving)
    report        report -> notify

Each stage takes the :class:`~mavias.ops.nightly.config.NightlyConfig` and the artifacts of the stages before it
(:mod:`mavias.ops.nightly.artifacts`: small JSON dicts of paths, URIs and counts, so XCom stays tiny) and returns its
own. Stages are idempotent: run twice, they do the work once. Heavy artifacts live in the workspace
(:mod:`mavias.ops.nightly.layout`)::

    partitions/<partition>/       pulled incoming partitions (manifest + images), refreshed by ETag
    revalidation/<partition>/     a validated partition validated again, until it passes (ops/nightly/revalidation)
    evaluation/<version>/         the pulled, fixed evaluation set
    discovery/                    the mavias.core.discovery workspace: tags, judge decisions, bias embeddings
    decoded/<key>/<partition>.pt  each partition's images decoded once per transform (key), for every dataset
    training/<digest>/            dataset/, prepared-data.pt, reference/, tuning/ -- keyed by the data and the config,
                                  so a retried or repeated night resumes or reuses instead of retraining
    production/<version>/         production checkpoints fetched to compare the candidate with
    nights/<night>/               validation/, eval/, package/<version>/, report/attempt-<n>/, relevance.parquet
                                  (the night's decisions) and relevance_changes.json (against the previous night)
    tuning/best_params.json       the previous night's best MAVias settings (tried first tonight)
    outbox/                       notification emails not sent yet (sent by the next report or notify step)
    history.json                  headline numbers of every night (mirrored to the bucket)
"""
