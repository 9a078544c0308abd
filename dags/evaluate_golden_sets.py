"""Airflow DAG `evaluate_golden_sets`, built from the core's one definition of the night.

The steps, their pools, Params and Assets are defined in `ragtrail.pipeline.night`;
`ragtrail nightly` runs the same steps in process. The DAG's documentation in the UI lists them.
"""

from ragtrail_dags import build_dag

dag = build_dag("evaluate_golden_sets")
