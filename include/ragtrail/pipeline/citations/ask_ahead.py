"""The citation scenarios' first round, asked as soon as a QA set exists.

The attributed-answer scenarios answer in two dependent rounds (:func:`run_scenarios`): the
closed-book answers and the sub-queries first, the cited answers built on them next. Inside the
citation step, which on an endpoint night runs once every set is evaluated, that makes two waves
of requests, the second a handful of requests on an otherwise idle endpoint. The first round
needs only the sampled questions, so the night asks it earlier: the golden sets' once their
retrieval is scanned, the test set's as soon as the generation has versioned it (beside its GX
check). Those requests join the
waves of the steps then running, their replies land in the call cache, and the citation step
finds them there and answers in one wave. It asks exactly what the step would ask (the same
sample, client and parameters), so nothing is asked twice and no number changes.

Asking ahead happens only where it can overlap other work and stays inside what the night
would spend:

* every model is an OpenAI-compatible endpoint (:meth:`Runtime.llm_calls_overlap`); a local
  answerer computes on the cores the running steps use, and the step asks for itself;
* no budget bounds the night or the citations: a bounded step may sample fewer questions, and
  its calls are counted within its allowance.

A reply that came back is cached, retries included, as every call of the client is
(:class:`~ragtrail.llm.client.LLMClient`); a request the endpoint never answered is not, and the
citation step asks it again and records its outcome as for its own calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragtrail.config import ModelRole
from ragtrail.evaluate.attribution.scenarios import FIRST_ROUND_SCENARIOS, FirstRound
from ragtrail.jsonsafe import JsonObject
from ragtrail.pipeline.citations.step import answer_params
from ragtrail.pipeline.run_io import QASetSource, load_items, sample_items
from ragtrail.runtime import Runtime


def why_not_ask_ahead(rt: Runtime) -> str | None:
    """Why this night's citation step asks its own first round (None: it may be asked ahead)."""
    cs = rt.settings.citations
    budgets = rt.settings.budgets
    if not cs.enabled:
        return "citations.enabled is false"
    if not set(cs.scenarios) & set(FIRST_ROUND_SCENARIOS):
        return "no configured scenario has a first round"
    if not rt.llm_calls_overlap():
        return "a local model serves the night: the citation step asks its first round itself"
    if budgets.night.is_set() or budgets.steps.citations.is_set():
        return "a budget bounds the citations: the step asks its first round within it"
    return None


def ask_citations_ahead(rt: Runtime, qa_sets: Sequence[QASetSource]) -> JsonObject:
    """Ask the scenarios' first round for each of ``qa_sets`` into the call cache, all sets at
    once; returns how many were asked, or why nothing was."""
    if why := why_not_ask_ahead(rt):
        return {"skipped": why}
    cs = rt.settings.citations
    seed = rt.settings.seed
    client = rt.llm(ModelRole.ANSWERER)
    items = [
        item
        for qa_set in qa_sets
        for item in sample_items(load_items(rt, qa_set)[0], cs.scenario_items, seed)
    ]
    asked = FirstRound(items, client, answer_params(cs, seed)).ask(cs.scenarios, cs.subqueries)
    return {"sets": len(qa_sets), "questions": len(items), "asked": asked}
