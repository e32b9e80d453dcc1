"""A local Airflow stack (`mavias airflow up`): api-server, dag-processor, scheduler, and with CeleryExecutor PostgreSQL, Redis and workers."""
