"""Airflow DAG `retrain_models`, built from the core's one definition of the night.

Scheduled on the drift Asset (only a decision that fired emits it), also triggered by hand with
Params. Training and gate tasks run in the `gpu` pool on the `gpu` queue; the steps are defined in
`ragtrail.pipeline.night` (RETRAIN).
"""

from ragtrail_dags import build_dag

dag = build_dag("retrain_models")
