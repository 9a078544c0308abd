"""Holding questions out by document, shared by every training split (citation, evidence).

Questions that share a ground document are one group: holding out one of them and training on
another would train on the held-out question's own document. Whole groups are held out, in a
seeded order, until the wanted share of the questions is reached; the last group always stays
for training.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from ragtrail.records import QAItem


def document_groups(items: Sequence[QAItem]) -> list[list[str]]:
    """Qids in connected groups (questions linked by a shared ground document), each sorted,
    groups ordered by their first qid (a stable order for the seeded shuffle)."""
    parent = {item.qid: item.qid for item in items}

    def root(qid: str) -> str:
        while parent[qid] != qid:
            parent[qid] = parent[parent[qid]]
            qid = parent[qid]
        return qid

    owner: dict[str, str] = {}
    for item in items:
        for doc in item.ground_doc_ids:
            if doc in owner:
                parent[root(item.qid)] = root(owner[doc])
            else:
                owner[doc] = item.qid
    groups: dict[str, list[str]] = {}
    for item in items:
        groups.setdefault(root(item.qid), []).append(item.qid)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


def held_out_questions(
    groups: list[list[str]], n_items: int, eval_share: float, rng: random.Random
) -> set[str]:
    """The qids of whole groups held out until ``eval_share`` of ``n_items`` is reached
    (``groups`` is shuffled in place with ``rng``)."""
    rng.shuffle(groups)
    wanted = max(1, math.ceil(eval_share * n_items))
    held: set[str] = set()
    for group in groups[:-1]:  # the last group always stays for training
        if len(held) >= wanted:
            break
        held.update(group)
    return held
