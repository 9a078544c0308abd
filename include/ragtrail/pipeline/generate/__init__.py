"""Test-set generation as a pipeline step: contexts -> candidates -> funnel -> immutable version.

One run, in order:

1. Retire accepted items whose document changed or disappeared since they were generated
   (their lineage names the document's content hash).
2. Keep the previous version's still-valid items (minus labels or documents being regenerated).
3. Draw contexts — chunks of added/updated documents first, then any unused chunk to top up the
   quotas — interleaved across documents, seeded.
4. Rounds until every label's quota is met or the pool is exhausted: statement extraction, one
   question per chosen statement, foreign-context pairs for unanswerable, labelling (only items whose
   observed label matches the requested one go on), the eight critiques, near-duplicate removal,
   then quota selection with a per-document cap.
5. The single-prompt baseline on a seeded sample of the drafted contexts, labelled by the same
   labeller (beside the shards).
6. Every candidate is stored with its final status (accepted, rejected with a reason, or failed with
   the raw output), the version is created (immutable, content-addressed), artifacts are written.

Everything random is seeded from the run's seed, and every model call goes through the
content-addressed cache, so a rerun with the same seed and cache produces the same version with zero
model calls.

The shards are drafted (statements, questions: the generator alone) and then judged (checks,
labels, critiques under the gates the calibration fixed), so drafting runs beside the judges'
calibration.

Modules: :mod:`.plan` (request, stored plan, contexts), :mod:`.orchestration` (the plan / draft /
judge / baseline / finalize entry points), :mod:`.candidates` (the model steps), :mod:`.rounds` (quotas and top-up
rounds), :mod:`.report_data` (the summary the report renders), :mod:`.artifacts` (the files of a
version) and :mod:`.quality` (GX checks).
"""

from ragtrail.pipeline.generate.artifacts import load_generation_summary
from ragtrail.pipeline.generate.orchestration import (
    draft_shard,
    finalize_generation,
    generate_testset,
    judge_shard,
    plan_generation,
    run_baseline,
)
from ragtrail.pipeline.generate.plan import (
    GenerationPlan,
    GenerationRequest,
    interleave,
    load_plan,
)
from ragtrail.pipeline.generate.quality import check_testset_quality
from ragtrail.pipeline.generate.report_data import funnel

__all__ = [
    "GenerationPlan",
    "GenerationRequest",
    "check_testset_quality",
    "draft_shard",
    "finalize_generation",
    "funnel",
    "generate_testset",
    "interleave",
    "judge_shard",
    "load_generation_summary",
    "load_plan",
    "plan_generation",
    "run_baseline",
]
