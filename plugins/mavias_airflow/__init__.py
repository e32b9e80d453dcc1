"""MAVias operators and hooks for Airflow 3, reusable by any DAG: ``from mavias_airflow.hooks import ...``.

Everything here is a thin adapter from Airflow (connections, operators) to the ``mavias`` library.
"""

from airflow.plugins_manager import AirflowPlugin


class MaviasPlugin(AirflowPlugin):
    """Lists the package in ``airflow plugins``; the hooks and operators are imported as modules."""

    name = "mavias"
