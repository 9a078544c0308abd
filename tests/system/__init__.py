"""System tests: the DAGs under a real Airflow scheduler (see test_airflow_scheduler.py)."""
