-- Runs once, when the postgres volume is first initialised: the platform's own metadata DB,
-- next to Airflow's ("airflow", created from POSTGRES_DB). ragtrail migrates its schema itself
-- (alembic, on first use of RAGTRAIL_DATABASE_URL).
CREATE DATABASE ragtrail;
