"""Publishing a generator output directory to the artifact store."""

from __future__ import annotations

from ragtrail.storage.artifacts import ArtifactStore
from ragtrail.train.backend import ADAPTER_SUBDIR, TOKENIZER_SUBDIR, TRAINING_JSON
from ragtrail.train.result import FinetuneResult


def publish_generator(result: FinetuneResult, artifacts: ArtifactStore, key_prefix: str) -> str:
    """Upload the whole output directory under ``key_prefix``; return the store's URI for it.

    The URI (a local path or ``s3://bucket/prefix``) can be passed straight to
    :class:`~ragtrail.train.backend.FineTunedGeneratorBackend`.
    """
    for required in (TRAINING_JSON, ADAPTER_SUBDIR, TOKENIZER_SUBDIR):
        if not (result.out_dir / required).exists():
            raise FileNotFoundError(f"{result.out_dir} has no {required}: not a generator output")
    return artifacts.put_tree(key_prefix, result.out_dir)
