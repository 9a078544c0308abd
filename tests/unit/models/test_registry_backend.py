"""``registry:<name>@<ref>`` LLM specs: tiny random models with real PEFT adapters, resolved,
downloaded and loaded through the registry; the question generator registered beside them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from ragtrail.config import ModelRole, RegistrySettings, Settings
from ragtrail.llm import load_llm_backend
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.models.bundle import write_bundle
from ragtrail.models.mlflow_registry import MlflowModelRegistry
from ragtrail.models.registry import CHALLENGER, RegistryError, promote
from ragtrail.runtime import Runtime
from ragtrail.storage.artifacts import LocalArtifactStore
from tests.tiny_models import build_tiny_llama, build_tiny_t5

NAME = "ragtrail-citation"
CORPUS = ["Passage [1] says the office opens at nine. [2] The rota changes on Tuesday."] * 5


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("llama"), CORPUS, initializer_range=0.2)


def make_adapter(base: Path, out: Path, seed: int) -> Path:
    """A LoRA adapter with random (non-zero) weights, so merging it changes the model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base)
    config = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(out)
    return out


def citation_bundle(base: Path, root: Path, seed: int, stages: tuple[str, ...] = ("sft",)) -> Path:
    adapters = {
        s: make_adapter(base, root / f"adapter-{seed}-{s}", seed + i) for i, s in enumerate(stages)
    }
    out = root / f"bundle-{seed}-{len(stages)}"
    write_bundle(
        out,
        kind="citation_answerer",
        base_model=str(base),
        adapters=adapters,
        lineage={"seeds": {"training": seed}},
    )
    return out


@pytest.fixture
def registry(tmp_path: Path) -> MlflowModelRegistry:
    return MlflowModelRegistry(
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        LocalArtifactStore(tmp_path / "artifacts"),
        cache_dir=tmp_path / "cache",
    )


def identity(backend: object) -> str:
    """The model part of a backend's cache identity (the transformers backend appends its
    decoding guide, ``+guided:<n>``, to the id it is given)."""
    return str(backend.model_id).split("+")[0]  # type: ignore[attr-defined]


def q_proj(model: object) -> torch.Tensor:
    return model.model.layers[0].self_attn.q_proj.weight.detach().clone()  # type: ignore[attr-defined]


def test_champion_and_challenger_resolve_to_their_versions(
    registry: MlflowModelRegistry, tiny_llama: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    v1 = registry.register_bundle(NAME, citation_bundle(tiny_llama, tmp_path, seed=1))
    v2 = registry.register_bundle(NAME, citation_bundle(tiny_llama, tmp_path, seed=2))
    promote(registry, NAME, 1, actor="t", reason="first")
    registry.set_alias(NAME, CHALLENGER, 2, actor="t", reason="retrained")

    champion = load_llm_backend(f"registry:{NAME}@champion", registry=registry, batch_size=2)
    assert identity(champion) == f"registry:{NAME}@v1:{v1.digest[:12]}"
    base_q = q_proj(AutoModelForCausalLM.from_pretrained(tiny_llama))
    assert not torch.allclose(q_proj(champion.model), base_q)  # the adapter was merged
    [result] = champion.generate(
        [GenerationRequest(messages=({"role": "user", "content": "When?"},), max_new_tokens=4)]
    )
    assert result.error is None

    challenger = load_llm_backend(f"registry:{NAME}@challenger", registry=registry)
    assert identity(challenger) == f"registry:{NAME}@v2:{v2.digest[:12]}"
    assert not torch.allclose(q_proj(challenger.model), q_proj(champion.model))

    # moving the alias changes what the same spec serves, and so its cache identity
    promote(registry, NAME, 2, actor="t", reason="gate passed")
    again = load_llm_backend(f"registry:{NAME}", registry=registry)
    assert again.model_id == challenger.model_id
    assert torch.allclose(q_proj(again.model), q_proj(challenger.model))
    pinned = load_llm_backend(f"registry:{NAME}@1", registry=registry)
    assert pinned.model_id == champion.model_id


def test_unknown_alias_fails_clearly_and_two_adapters_merge_in_order(
    registry: MlflowModelRegistry, tiny_llama: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    registry.register_bundle(NAME, citation_bundle(tiny_llama, tmp_path, 3, ("sft", "rl")))
    with pytest.raises(RegistryError, match="no alias 'champion'"):
        load_llm_backend(f"registry:{NAME}@champion", registry=registry)
    both = load_llm_backend(f"registry:{NAME}@1", registry=registry)
    registry.register_bundle(NAME, citation_bundle(tiny_llama, tmp_path / "one", 3, ("sft",)))
    sft_only = load_llm_backend(f"registry:{NAME}@2", registry=registry)
    # same seed, so the sft adapters are equal: the rl adapter on top changes the weights
    base_q = q_proj(AutoModelForCausalLM.from_pretrained(tiny_llama))
    assert not torch.allclose(q_proj(sft_only.model), base_q)
    assert not torch.allclose(q_proj(both.model), q_proj(sft_only.model))


def test_runtime_answerer_uses_the_configured_registry(tiny_llama: Path, tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path / "home",
        registry=RegistrySettings(tracking_uri=f"sqlite:///{tmp_path / 'reg' / 'mlflow.db'}"),
        models={"answerer": f"registry:{NAME}@champion"},
    )
    registry = MlflowModelRegistry.from_settings(settings)
    version = registry.register_bundle(NAME, citation_bundle(tiny_llama, tmp_path, seed=4))
    promote(registry, NAME, 1, actor="t", reason="first")
    assert registry.artifacts.uri.startswith(str(tmp_path / "home" / "artifacts"))
    rt = Runtime(settings)
    try:
        client = rt.llm(ModelRole.ANSWERER)
        assert identity(client.backend) == f"registry:{NAME}@v1:{version.digest[:12]}"
    finally:
        rt.close()
    # The configured precision reaches registered models too, and keeps their answers apart.
    generation = settings.generation.model_copy(update={"llm_dtype": "bfloat16"})
    half = Runtime(settings.model_copy(update={"generation": generation}))
    try:
        backend = half.llm(ModelRole.ANSWERER).backend
        assert next(backend.model.parameters()).dtype == torch.bfloat16  # type: ignore[attr-defined]
        assert backend.model_id.startswith(  # type: ignore[attr-defined]
            f"registry:{NAME}@v1:{version.digest[:12]}+dtype:bfloat16"
        )
    finally:
        half.close()


# ---------------------------------------------------------------------------- the generator


def test_generator_registers_and_serves_from_the_registry(
    registry: MlflowModelRegistry, tmp_path: Path
) -> None:
    import ragtrail.train  # noqa: F401  (registers the generator: spec kind)
    from ragtrail.train import GeneratorTrainingConfig, finetune_generator
    from ragtrail.train.backend import generator_request
    from ragtrail.train.data import TrainingExample, format_input, format_target
    from ragtrail.train.registration import register_generator

    facts = [
        ("The office opens at nine.", "When does the office open?", "nine"),
        ("The rota changes on Tuesday.", "When does the rota change?", "Tuesday"),
        ("Expenses need a receipt.", "What do expenses need?", "a receipt"),
        ("Laptops are replaced every three years.", "How often are laptops replaced?", "three"),
    ]
    examples = [
        TrainingExample(
            input=format_input("fact_single", ctx),
            target=format_target("fact_single", q, a),
            label="fact_single",
            context_id=f"d{i}#0",
            candidate_id=f"c{i}",
            doc_id=f"d{i}",
        )
        for i, (ctx, q, a) in enumerate(facts)
    ]
    corpus = [t for ex in examples for t in (ex.input, ex.target)] * 3
    base = build_tiny_t5(tmp_path / "t5", corpus, vocab_size=300, dropout_rate=0.0)
    config = GeneratorTrainingConfig(
        kind="seq2seq", max_steps=3, batch_size=2, lora_r=4, n_samples=2, seed=5,
        held_out_fraction=0.25, max_source_len=32, max_target_len=24,
    )  # fmt: skip
    result = finetune_generator(str(base), examples, out_dir=tmp_path / "gen", config=config)

    version = register_generator(
        registry,
        "ragtrail-generator",
        result.out_dir,
        evaluation_metrics={"parse_rate": 0.75, "acceptance_rate": 0.5},
    )
    assert version.kind == "generator"
    lineage = version.lineage or {}
    assert lineage["training_data"]["version"] == result.data_version
    assert lineage["training_data"]["split"]["n_train"] == result.n_train
    assert lineage["seeds"] == {"training": 5}
    assert lineage["training_metrics"]["steps"] == 3
    assert lineage["evaluation_metrics"] == {"parse_rate": 0.75, "acceptance_rate": 0.5}
    assert [m.kind for m in registry.list_models()] == ["generator"]

    promote(registry, "ragtrail-generator", 1, actor="t", reason="first")
    backend = load_llm_backend("registry:ragtrail-generator@champion", registry=registry)
    assert backend.model_id == f"registry:ragtrail-generator@v1:{version.digest[:12]}"
    # the registered generator reproduces the greedy samples recorded at training time
    for sample in result.samples:
        label, _, context = sample["input"].removeprefix("<<").partition(">> ")
        [out] = backend.generate(
            [generator_request(label, context, max_new_tokens=config.max_target_len)]
        )
        assert out.text == sample["generated"]
    half = load_llm_backend(
        "registry:ragtrail-generator@champion", registry=registry, dtype="bfloat16"
    )
    assert half.model_id == f"{backend.model_id}+dtype:bfloat16"

    # the same output directory through the CLI, into the configured registry of a fresh home
    import json

    from typer.testing import CliRunner

    from ragtrail.cli import app

    cli = CliRunner().invoke(
        app,
        ["models", "register-generator", str(result.out_dir), "--json"],
        env={"RAGTRAIL_HOME": str(tmp_path / "cli-home")},
    )
    assert cli.exit_code == 0, cli.output
    registered = json.loads(cli.stdout)
    assert (registered["name"], registered["version"], registered["kind"]) == (
        "ragtrail-generator",
        1,
        "generator",
    )
    assert registered["digest"] == version.digest  # same bundle content, same digest
