"""The benchmark harness on tiny random models: Ray vs local equality, resuming, bad input, reporting.

No timing is asserted anywhere; only outputs, taus, counts and error messages.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_model
from specdec.benchmarks import execute
from specdec.benchmarks.cli import main as bench_main
from specdec.benchmarks.config import ConfigError, SweepConfig, check_plugins
from specdec.benchmarks.datasets import DatasetError, PromptBuilder, load_dataset
from specdec.benchmarks.metrics import summarize
from specdec.benchmarks.oracle import prompt_key, register_oracle
from specdec.benchmarks.report import write_report
from specdec.benchmarks.runner import RESULTS_FILE, run_sweep
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import specdec
from specdec import Draft, Drafter, Verdict, Verifier, register_drafter, register_verifier
from specdec.errors import PluginLoadError, PluginNotFoundError, PluginOptionsError
from specdec.registry import unregister

VOCAB = 300


def _tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<eos>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 10, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    """A tiny Llama target with a tokenizer beside it, saved like any local model directory."""
    root = tmp_path_factory.mktemp("bench_model")
    tiny_model("llama", vocab=VOCAB).save_pretrained(root / "target")
    _tokenizer().save_pretrained(root / "target")
    return root / "target"


@pytest.fixture(scope="module")
def data_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bench_data")
    spec = root / "question.jsonl"
    rows = [
        {"question_id": 1, "category": "writing", "turns": ["Write about a fox.", "Now make it shorter."]},
        {"question_id": 2, "category": "qa", "turns": ["who is the lazy dog"]},
    ]
    spec.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = root / "prompts.txt"
    text.write_text("the quick brown fox\nthe lazy dog jumps over\n")
    return {"spec": spec, "text": text}


def _config(model_dir: Path, dataset: dict, drafters: list, **extra) -> SweepConfig:
    return SweepConfig(models=[{"path": str(model_dir)}], drafters=drafters, datasets=[dataset],
                       baselines=["hf_generate"], max_new_tokens=6, warmup=0, **extra)


def _outputs(records: list[dict]) -> dict:
    """What must not depend on the backend: every cell's tokens and per-call tau and step counts."""
    result = {}
    for record in records:
        assert record["status"] == "ok", record.get("error")
        tokens = [turn["tokens"] for sample in record["samples"] for turn in sample["turns"]]
        taus = [(c["stats"] or {}).get("mean_accepted") for c in record["calls"]]
        steps = [(c["stats"] or {}).get("steps") for c in record["calls"]]
        result[record["cell_id"]] = (tokens, taus, steps)
    return result


def test_ray_backend_matches_local(tiny_dir, data_files, tmp_path):
    pytest.importorskip("ray", reason="ray is in the bench extra: pip install -e '.[bench]'")
    from specdec.benchmarks.ray_backend import RayBackend

    config = _config(tiny_dir, {"kind": "spec_bench", "path": str(data_files["spec"])},
                     ["none", {"name": "oracle", "options": {"draft_length": 3}}])
    _, local = run_sweep(config, tmp_path / "local", show_progress=False)
    backend = RayBackend(num_cpus=2)
    try:
        _, distributed = run_sweep(config, tmp_path / "ray", backend=backend, show_progress=False)
    finally:
        backend.close()
    assert _outputs(local) == _outputs(distributed)
    oracle = next(r for r in local if r["cell"]["label"].startswith("oracle"))
    assert max(c["stats"]["mean_accepted"] for c in oracle["calls"]) > 1.0


def test_interrupted_sweep_resumes_without_redoing_cells(tiny_dir, data_files, tmp_path, monkeypatch):
    executed: list[str] = []
    real = execute.execute_cell

    def counting(cell, *args, **kwargs):
        executed.append(cell.cell_id)
        return real(cell, *args, **kwargs)

    monkeypatch.setattr(execute, "execute_cell", counting)
    config = _config(tiny_dir, {"kind": "text", "path": str(data_files["text"])},
                     ["none", {"name": "oracle", "options": {"draft_length": 2}},
                      {"name": "oracle", "options": {"draft_length": 4}}])

    def interrupt_after_two(record: dict) -> None:
        if len(executed) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # sequential: each cell is stored as it finishes
        run_sweep(config, tmp_path, show_progress=False, after_cell=interrupt_after_two, interleave=False)
    first = list(executed)
    assert len(first) == 2
    cells, records = run_sweep(config, tmp_path, show_progress=False, interleave=False)
    assert len(cells) == 4  # hf_generate, none, two oracles
    assert sorted(executed) == sorted(c.cell_id for c in cells)  # each cell ran exactly once overall
    assert all(r["status"] == "ok" for r in records)
    lines = (tmp_path / RESULTS_FILE).read_text().splitlines()
    assert len(lines) == 4
    executed.clear()
    run_sweep(config, tmp_path, show_progress=False, interleave=False)
    assert executed == []
    run_sweep(config, tmp_path, show_progress=False, fresh=True, interleave=False)  # after a code change
    assert sorted(executed) == sorted(c.cell_id for c in cells)
    assert len((tmp_path / RESULTS_FILE).read_text().splitlines()) == 4
    assert (tmp_path / (RESULTS_FILE + ".previous")).is_file()


def test_interleaved_cells_take_turns_and_match_sequential_outputs(tiny_dir, data_files, tmp_path, monkeypatch):
    order: list[tuple[str, int]] = []
    real = execute.CellRun.run_unit

    def logged(self, index):
        order.append((self.cell.cell_id, index))
        return real(self, index)

    monkeypatch.setattr(execute.CellRun, "run_unit", logged)
    # Oracles: their steps do not depend on timings (under the live goodput controller only the tokens
    # would be equal between two runs, not the taus compared below).
    config = _config(tiny_dir, {"kind": "spec_bench", "path": str(data_files["spec"])},
                     ["none", {"name": "oracle", "options": {"draft_length": 2}},
                      {"name": "oracle", "options": {"draft_length": 3}}], repeats=2)
    cells, interleaved = run_sweep(config, tmp_path / "interleaved", show_progress=False)
    measured = [c.cell_id for c in cells if not c.is_reference]
    units = 2 * 2  # two repeats of two batches (one per category)
    runs = order[units:]  # the reference cell (hf_generate) runs alone first
    assert order[:units] == [(next(c.cell_id for c in cells if c.is_reference), i) for i in range(units)]
    assert [index for _, index in runs] == [i for i in range(units) for _ in measured]  # round by round
    rounds = [[cell for cell, _ in runs[i:i + len(measured)]] for i in range(0, len(runs), len(measured))]
    assert all(sorted(r) == sorted(measured) for r in rounds)
    assert len({r[0] for r in rounds}) == len(measured)  # each round starts at another cell
    order.clear()
    _, sequential = run_sweep(config, tmp_path / "sequential", show_progress=False, interleave=False)
    assert [cell for cell, _ in order] == [c.cell_id for c in cells for _ in range(units)]  # cell after cell
    assert _outputs(interleaved) == _outputs(sequential)
    assert all(len(call["wall_times"]) == 2 for r in interleaved for call in r["calls"])


def test_each_cell_prices_its_steps_with_a_cost_model_of_its_own(tiny_dir, data_files, tmp_path, monkeypatch):
    """Sharing the model's cost model, `auto`'s layer_skip verdicts became the `layer_skip` cell's priors:
    each cell keeps one cost model for all its calls, as a server running that method would."""
    import specdec

    seen: dict[str, list] = {}
    real = specdec.generate

    def recorded(model, prompts, *, drafter, cost_model=None, **kwargs):
        seen.setdefault(drafter.name, []).append(cost_model)
        return real(model, prompts, drafter=drafter, cost_model=cost_model, **kwargs)

    monkeypatch.setattr(specdec, "generate", recorded)
    config = _config(tiny_dir, {"kind": "spec_bench", "path": str(data_files["spec"])}, ["anpd", "auto"],
                     repeats=2)
    _, records = run_sweep(config, tmp_path, show_progress=False)
    assert all(record["status"] == "ok" for record in records), [r.get("error") for r in records]
    assert {"anpd", "auto"} <= set(seen) and all(len(models) >= 4 for models in seen.values())
    per_cell = [{id(m) for m in models} for models in seen.values()]  # (the sweep adds a `none` cell)
    assert all(len(ids) == 1 for ids in per_cell) and len(set.union(*per_cell)) == len(seen)
    assert None not in seen["anpd"]


def test_a_sweep_over_some_categories_runs_only_them(tiny_dir, data_files, tmp_path):
    """`--categories` (a list in the dataset spec): the cells run, on those categories' prompts only."""
    config = _config(tiny_dir, {"kind": "spec_bench", "path": str(data_files["spec"]), "categories": ["qa"]},
                     ["none"])
    _, records = run_sweep(config, tmp_path, show_progress=False)
    assert all(record["status"] == "ok" for record in records), [r.get("error") for r in records]
    assert {sample["category"] for record in records for sample in record["samples"]} == {"qa"}


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question_id": 1, "category": "qa", "turns": ["hi"]}\n\n{"question_id": 2, "categ\n')
    with pytest.raises(DatasetError, match=rf"{path}:3: not valid JSON"):
        load_dataset("spec_bench", path)
    path.write_text('{"question_id": 1, "category": "qa", "turns": ["hi"]}\n{"question_id": 2, "turns": ["x"]}\n')
    with pytest.raises(DatasetError, match=rf"{path}:2: missing field 'category'"):
        load_dataset("spec_bench", path)
    gz = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(gz, "wt") as handle:
        handle.write('{"task_id": "t/0", "prompt": "def f():\\n"}\n{"task_id": "t/1", "prompt": 5}\n')
    with pytest.raises(DatasetError, match=rf"{gz}:2: field 'prompt' must be str"):
        load_dataset("humaneval", gz)


def test_unknown_category_lists_known_ones(data_files):
    with pytest.raises(DatasetError) as info:
        load_dataset("spec_bench", data_files["spec"], categories=["poetry"])
    message = str(info.value)
    assert "'poetry'" in message and "Known categories: mt_bench, qa, writing" in message
    picked = load_dataset("spec_bench", data_files["spec"], categories=["mt_bench"])
    assert [s.sample_id for s in picked] == ["1"] and picked[0].category == "mt_bench"


def test_shipped_spec_bench_file():
    samples = load_dataset("spec_bench", per_category=2)
    categories = {s.category for s in samples}
    assert categories == {"mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"}
    mt = [s for s in samples if s.category == "mt_bench"]
    assert len(mt) == 2 and len({s.raw_category for s in mt}) == 2 and all(len(s.turns) == 2 for s in mt)


def test_unknown_drafter_fails_before_any_model_is_loaded(tmp_path, monkeypatch, capsys):
    def no_loading(spec):
        raise AssertionError("a model was loaded before the drafter names were checked")

    monkeypatch.setattr(execute, "_load", no_loading)
    config = SweepConfig(models=[{"path": str(tmp_path / "no-such-model")}], drafters=["nonee"])
    with pytest.raises(PluginNotFoundError, match="Did you mean 'none'"):
        run_sweep(config, tmp_path / "out", show_progress=False)
    assert not (tmp_path / "out" / RESULTS_FILE).exists()
    code = bench_main(["--model", str(tmp_path / "no-such-model"), "--drafter", "nonee", "--out", str(tmp_path / "o")])
    assert code == 2 and "unknown drafter 'nonee'" in capsys.readouterr().err
    bad_options = SweepConfig(models=[str(tmp_path)], drafters=[{"name": "oracle", "options": {"draft_length": 0}}])
    with pytest.raises(PluginOptionsError):
        check_plugins(bad_options)
    with pytest.raises(ConfigError, match="is not a local directory"):
        check_plugins(SweepConfig(models=[str(tmp_path / "missing")], drafters=["none"]))


def test_second_turn_follows_the_models_own_answer(tiny_dir, data_files, tmp_path):
    config = _config(tiny_dir, {"kind": "spec_bench", "path": str(data_files["spec"])}, ["none"])
    cells, records = run_sweep(config, tmp_path, show_progress=False)
    record = next(r for c, r in zip(cells, records) if c.is_reference)
    sample = next(s for s in record["samples"] if s["sample_id"] == "1")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tiny_dir)
    builder = PromptBuilder(tokenizer, 256, 6)
    first_answer = tokenizer.decode(sample["turns"][0]["tokens"], skip_special_tokens=True)
    expected, _ = builder.encode([("Write about a fox.", first_answer)], "Now make it shorter.")
    assert sample["turns"][1]["prompt_tokens"] == len(expected)
    assert "\n\n".join(["Write about a fox.", first_answer, "Now make it shorter."]) == tokenizer.decode(expected)
    tokenizer.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% endif %}")
    chat = PromptBuilder(tokenizer, 256, 6)
    ids, cut = chat.encode([("q1", "a1")], "q2")
    assert tokenizer.decode(ids) == "<user>q1<assistant>a1<user>q2<assistant>" and not cut


def test_long_prompts_are_cut_from_the_left_and_reported(tiny_dir, tmp_path):
    text = tmp_path / "long.txt"
    text.write_text(" ".join(["fox"] * 400) + " END\nshort one\n")
    config = _config(tiny_dir, {"kind": "text", "path": str(text)}, ["none"])
    cells, records = run_sweep(config, tmp_path / "out", show_progress=False)
    turns = [s["turns"][0] for s in records[0]["samples"]]
    assert turns[0]["truncated"] and turns[0]["prompt_tokens"] == 256 - 6 and not turns[1]["truncated"]
    assert any("truncated from the left" in note for note in records[0]["notes"])


class _WrongDrafter(Drafter):
    name = "test-wrong"
    description = "test: always guesses token 1 twice"

    def propose(self, state):
        return Draft.chain(torch.ones(state.batch_size, 2, dtype=torch.long))


class _AcceptAllVerifier(Verifier):
    name = "test-accept-all"
    description = "test: a broken verifier that claims to be lossless and keeps every guess"
    lossless = True

    def verify(self, draft, logits, sampling, generator):
        width = draft.width
        accepted = torch.arange(width).expand(draft.batch_size, width).clone()
        bonus = logits[:, width].argmax(-1)
        return Verdict(accepted, draft.num_nodes.clone(), bonus)


def test_mismatch_and_broken_drafter_are_reported_as_failures(tiny_dir, data_files, tmp_path, monkeypatch):
    register_drafter("test-wrong", _WrongDrafter)
    register_verifier("test-accept-all", _AcceptAllVerifier)
    from specdec import registry

    real_load = registry.load_class

    def broken(kind, name):
        if name == "anpd":
            raise PluginLoadError("drafter 'anpd' failed to import: ImportError('simulated')")
        return real_load(kind, name)

    monkeypatch.setattr(registry, "load_class", broken)
    try:
        config = _config(tiny_dir, {"kind": "text", "path": str(data_files["text"])},
                         ["none", "anpd", "test-wrong"], verifiers=["test-accept-all"])
        cells, records = run_sweep(config, tmp_path, show_progress=False)
        summary = summarize(cells, records)
        kinds = {(f["label"], f["kind"]) for f in summary["failures"]}
        assert ("anpd", "cell failed") in kinds
        assert ("test-wrong", "greedy output differs from the baseline") in kinds
        assert len(summary["failures"]) == 2  # none (one token per step) still matches
        result = write_report(cells, records, config, tmp_path, command="test")
        markdown = (tmp_path / "results.md").read_text()
        assert "## FAILURES (2)" in markdown and "MISMATCH" in markdown
        assert {"speedup_by_category.png", "tau_distribution.png", "acceptance_by_position.png"} <= set(
            result["plots"])
        assert all((tmp_path / name).stat().st_size > 1000 for name in result["plots"])
        assert result["machine"]["torch"] == torch.__version__
    finally:
        unregister("drafter", "test-wrong")
        unregister("verifier", "test-accept-all")


def test_config_from_yaml_json_and_flags(tmp_path):
    from specdec.benchmarks.cli import build_parser, config_from_args
    from specdec.benchmarks.config import load_config
    from specdec.benchmarks.datasets import repo_root

    example = load_config(repo_root() / "benchmarks" / "configs" / "example.yaml")
    assert example.drafters[2].options["model"] == "@draft" and example.datasets[1].kind == "humaneval"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"models": ["default"], "drafters": ["none"], "max_new_tokns": 5}))
    with pytest.raises(ConfigError, match="max_new_tokns"):
        load_config(bad)
    args = build_parser().parse_args(["--config", str(repo_root() / "benchmarks" / "configs" / "example.yaml"),
                                      "--drafter", "oracle:draft_length=8", "--per-category", "1",
                                      "--max-new-tokens", "16", "--out", str(tmp_path)])
    config = config_from_args(args)
    assert [d.display for d in config.drafters] == ["oracle(draft_length=8)"]
    assert config.max_new_tokens == 16 and all(d.per_category == 1 for d in config.datasets)
    assert config.datasets[0].categories == ["mt_bench", "summarization", "rag"]


def test_device_and_dtype_flags_place_every_model(tiny_dir, data_files, tmp_path):
    """`--device`/`--dtype` reach every model of the sweep, and a run loads its models there (here the CPU in
    bfloat16: the same path a GPU run takes), its draft beside the target."""
    from specdec.benchmarks.cli import build_parser, config_from_args
    from specdec.benchmarks.execute import _load

    args = build_parser().parse_args(["--preset", "quick", "--device", "cuda", "--dtype", "bfloat16",
                                      "--out", str(tmp_path)])
    assert [(m.device, m.dtype) for m in config_from_args(args).models] == [("cuda", "bfloat16")]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--preset", "quick", "--dtype", "int8", "--out", str(tmp_path)])
    config = _config(tiny_dir, {"kind": "text", "path": str(data_files["text"])}, ["none"])
    spec = config.models[0].model_copy(update={"device": "cpu", "dtype": "bfloat16", "draft": str(tiny_dir)})
    loaded = _load(spec)
    for model in (loaded.target, loaded.draft):
        weight = model.get_input_embeddings().weight
        assert (weight.device.type, weight.dtype) == ("cpu", torch.bfloat16)


def test_presets_run_the_bundled_model_on_one_thread_and_the_flag_overrides(tiny_dir, data_files, tmp_path):
    from specdec.benchmarks.cli import build_parser, config_from_args
    from specdec.benchmarks.config import preset

    assert preset("quick").threads == preset("full").threads == 1
    assert preset("quick", str(tiny_dir)).threads is None  # other models keep torch's default
    quick = preset("quick")
    assert (quick.max_new_tokens, quick.datasets[0].per_category, quick.warmup) == (64, 2, 1)
    args = build_parser().parse_args(["--preset", "quick", "--threads", "2", "--out", str(tmp_path)])
    assert config_from_args(args).threads == 2
    before = torch.get_num_threads()
    try:
        config = _config(tiny_dir, {"kind": "text", "path": str(data_files["text"])}, ["none"], threads=2)
        cells, records = run_sweep(config, tmp_path / "two", show_progress=False)
        result = write_report(cells, records, config, tmp_path / "two", command="test")
        assert result["machine"]["torch_threads"] == 2 and result["config"]["threads"] == 2
    finally:
        torch.set_num_threads(before)


def test_per_sample_tau_is_per_row_at_batch_above_one(tiny_dir, data_files, tmp_path):
    """A batched cell reports each sample's own tau (its row's counts), equal to the same sample's
    tau at batch 1: drafts and outputs per row do not depend on the batch."""
    # anpd's own constant schedule: the goodput controller prices a batch as a whole (greedy), so its cuts
    # may differ between batch sizes; here the drafts themselves must not.
    config = SweepConfig(models=[{"path": str(tiny_dir)}], drafters=[{"name": "anpd", "options": {"schedule": "constant"}}],
                         baselines=["hf_generate"], datasets=[{"kind": "text", "path": str(data_files["text"])}],
                         max_new_tokens=40, warmup=0, batch_sizes=[1, 2])
    cells, records = run_sweep(config, tmp_path, show_progress=False)
    anpd = [(c, r) for c, r in zip(cells, records) if c.label.startswith("anpd")]
    assert any(len(call["rows"]) == 2 for c, r in anpd if c.batch_size == 2 for call in r["calls"])
    summary = [s for s in summarize(cells, records)["cells"] if s["label"].startswith("anpd")]
    alone = next(s["per_sample_tau"] for s in summary if s["batch_size"] == 1)
    batched = next(s["per_sample_tau"] for s in summary if s["batch_size"] == 2)
    assert len(set(alone)) == 2, "the two samples should differ in tau, or a per-call tau would pass too"
    assert batched == pytest.approx(alone)
    # CPU-time speedups are reported beside wall-clock ones (no value is asserted: timing).
    assert all(s["categories"]["overall"]["speedup_cpu"] is not None for s in summary)


def test_oracle_accuracy_sets_how_often_its_guesses_are_right():
    """The benchmark's oracle with accuracy p: output stays greedy, the same drafts in any batch, and the
    share of guessed positions that are right follows p (0: every draft is one wrong token)."""
    register_oracle()
    model = tiny_model("llama", vocab=VOCAB)
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in (5, 9, 14, 7)]
    greedy = specdec.generate(model, prompts, drafter="none", max_new_tokens=40).sequences
    continuations = {prompt_key(p): seq for p, seq in zip(prompts, greedy)}
    rates = {}
    for accuracy in (0.0, 0.5, 1.0):
        options = {"continuations": continuations, "draft_length": 4, "accuracy": accuracy}
        batch = specdec.generate(model, prompts, drafter="oracle", drafter_options=options, max_new_tokens=40)
        assert batch.sequences == greedy
        alone = [specdec.generate(model, p, drafter="oracle", drafter_options=options,
                                  max_new_tokens=40).stats.row_drafted[0] for p in prompts]
        assert batch.stats.row_drafted == alone
        rates[accuracy] = batch.stats.accepted_tokens / batch.stats.drafted_tokens
    assert rates[0.0] == 0.0 and rates[1.0] == 1.0
    assert 0.25 < rates[0.5] < 0.75


def test_each_batching_cell_prices_its_steps_with_a_cost_model_of_its_own(tmp_path, monkeypatch):
    """`python -m specdec.benchmarks.batching` on the bundled pair, shrunk: every speculative cell (mode, drafter)
    keeps one cost model over its warm-up, repeats and batch sizes, none shared with another cell or with the
    model's own (sharing that one, draft_model at B=2 drafted or not depending on the cells run before it)."""
    from specdec.benchmarks import batching

    import specdec
    from specdec.costs import cost_model_for

    seen: dict[tuple, list] = {}
    targets = []
    real = specdec.generate

    def recorded(model, prompts, *, drafter, cost_model=None, batch_mode="unpadded", max_batch_size=None, **kwargs):
        targets.append(model)
        key = (drafter if isinstance(drafter, str) else drafter.name, batch_mode, max_batch_size is not None)
        seen.setdefault(key, []).append(cost_model)
        return real(model, prompts, drafter=drafter, cost_model=cost_model, batch_mode=batch_mode,
                    max_batch_size=max_batch_size, **kwargs)

    monkeypatch.setattr(specdec, "generate", recorded)
    assert batching.main(["--batch-sizes", "1", "2", "--prompts", "2", "--new-tokens", "4", "--drafters", "anpd",
                          "--modes", "unpadded", "continuous", "--oracle-accuracies", "1.0", "--repeats", "1",
                          "--threads", "1", "--aa", "--out", str(tmp_path)]) == 0
    speculative = {key: models for key, models in seen.items() if key[0] != "none"}
    assert set(speculative) == {("anpd", "unpadded", False), ("anpd", "unpadded", True),
                                ("oracle", "unpadded", False)}
    per_cell = [{id(m) for m in models} for models in speculative.values()]
    assert all(len(models) >= 4 for models in speculative.values())  # warm-up and repeat at B = 1 and 2
    assert all(len(ids) == 1 for ids in per_cell) and len(set.union(*per_cell)) == len(per_cell)
    shared = cost_model_for(targets[0], "cpu")
    assert all(models[0] is not None and models[0] is not shared for models in speculative.values())
    rows = json.loads((tmp_path / "result.json").read_text())["rows"]  # --aa: plain decoding again, apart
    assert [(r["batch"], r["drafter"]) for r in rows if r["mode"] == "autoregressive"] == [
        (1, "none"), (1, batching.AA_LABEL), (2, "none"), (2, batching.AA_LABEL)]
    from specdec.benchmarks import batching_targets

    text = batching_targets.main(tmp_path)
    assert "A/A: `none-again`" in text and text.count("anpd (unpadded) B=") >= 2


def test_draft_vocab_benchmark_writes_a_table_of_equal_outputs(tmp_path):
    """`python -m specdec.benchmarks.draft_vocab` on the bundled pair, shrunk to 2 prompts: every cell's
    output equals autoregressive decoding, coverage shrinks with the vocabulary, and the table is written."""
    from specdec.benchmarks import draft_vocab

    assert draft_vocab.main(["--prompts", "2", "--batch-sizes", "2", "--repeats", "1", "--out", str(tmp_path)]) == 0
    cells = json.loads((tmp_path / "result.json").read_text())["cells"]
    assert len(cells) == len(draft_vocab.SIZES) * len(draft_vocab.SCHEDULES)
    assert all(cell["equal"] for cell in cells)
    coverage = {cell["draft_vocab"]: cell["coverage"] for cell in cells}
    assert coverage[0] == 1.0 and coverage[4096] >= coverage[2048] >= coverage[1024] > 0
    assert (tmp_path / "table.md").read_text().count("| 2 |") == len(cells)


def _bench_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`specdec bench` in a child process, stdout and stderr in one pipe as a CI log would hold them."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # pipes are block-buffered
    return subprocess.run([sys.executable, "-m", "specdec.cli", "bench", *args, "--no-progress"], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)


def test_bench_exit_status_and_last_line_say_when_a_cell_failed(tiny_dir, tmp_path):
    broken = tmp_path / "broken.jsonl"  # exists, so the sweep starts; unreadable, so every cell fails
    broken.write_text('{"question_id": 1, "category": "qa", "turns": ["who"]}\nnot json\n')
    common = ["--model", str(tiny_dir), "--drafter", "none", "--baseline", "hf_generate", "--max-new-tokens", "4",
              "--warmup", "0"]
    run = _bench_cli([*common, "--dataset", f"spec_bench:{broken}", "--out", str(tmp_path / "failed")], tmp_path)
    last = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 1, run.stdout
    assert last.startswith("specdec bench: FAILED") and "2 of 2 cells" in last and "results.md" in last, run.stdout
    assert f"{broken}:2: not valid JSON" in (tmp_path / "failed" / "results.md").read_text()

    missing = tmp_path / "missing.jsonl"
    run = _bench_cli([*common, "--dataset", f"spec_bench:{missing}", "--out", str(tmp_path / "missing")], tmp_path)
    last = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 2 and last.startswith("specdec bench: error:"), run.stdout
    assert str(missing) in last and "--dataset spec_bench:PATH" in last
    assert not (tmp_path / "missing" / RESULTS_FILE).exists()  # failed before any model loaded

    good = tmp_path / "good.jsonl"
    good.write_text('{"question_id": 1, "category": "qa", "turns": ["the quick brown fox"]}\n')
    run = _bench_cli([*common, "--dataset", f"spec_bench:{good}", "--out", str(tmp_path / "ok")], tmp_path)
    assert run.returncode == 0 and run.stdout.strip().splitlines()[-1].startswith("specdec bench: ok"), run.stdout


def test_a_parting_at_a_rounding_tie_is_told_from_a_wrong_token() -> None:
    from specdec.benchmarks.ties import parting

    model = tiny_model("llama").to(torch.bfloat16)
    prompt = [5, 6, 7, 5, 6]
    greedy = specdec.generate(model, prompt, max_new_tokens=8).sequences[0]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + greedy[:3]], device=model.device)).logits[0, -1]
    worst = int(logits.argmin())
    assert parting(model, prompt, greedy, greedy) is None
    wrong = parting(model, prompt, greedy[:3] + [worst] + greedy[4:], greedy)
    assert wrong["position"] == 3 and not wrong["tie"] and wrong["gap"] > wrong["tolerance"] > 0
    # the method took the reference prefix's best token where the reference took another: gap 0, a tie
    right = parting(model, prompt, greedy, greedy[:3] + [worst] + greedy[4:])
    assert right["position"] == 3 and right["gap"] == 0 and right["tie"]
    # a method that stopped first chose the stop token there
    stopped = parting(model, prompt, greedy[:3], greedy, stop_tokens={worst})
    assert stopped["position"] == 3 and not stopped["tie"]
    assert parting(model, prompt, greedy[:3], greedy)["tie"] is False  # no stop token known: not a tie


def test_the_greedy_check_counts_near_ties_apart_from_mismatches() -> None:
    from types import SimpleNamespace

    from specdec.benchmarks.metrics import equality

    cell = SimpleNamespace(temperature=0.0, method="specdec")

    def turn(tokens, key, parted=None):
        return {"tokens": tokens, "prompt_key": key, **({"parted": parted} if parted else {})}

    tie = {"position": 1, "gap": 0.01, "tolerance": 0.05, "tie": True}
    wrong = {"position": 1, "gap": 3.0, "tolerance": 0.05, "tie": False}
    reference = {"status": "ok", "samples": [{"sample_id": "a", "turns": [turn([1, 2, 3], "p"), turn([4, 5], "q")]},
                                             {"sample_id": "b", "turns": [turn([7, 8], "r")]}]}
    same = {"samples": [{"sample_id": "a", "turns": [turn([1, 2, 3], "p"), turn([4, 5], "q")]},
                        {"sample_id": "b", "turns": [turn([7, 8], "r")]}]}
    assert equality(cell, same, reference)["status"] == "identical"
    # a tie in turn 1, so turn 2's prompt (holding that answer) differs and its answer with it: both ties
    tied = {"samples": [{"sample_id": "a", "turns": [turn([1, 9, 3], "p", tie), turn([6], "q2")]},
                        {"sample_id": "b", "turns": [turn([7, 8], "r")]}]}
    check = equality(cell, tied, reference)
    assert (check["near_ties"], check["mismatches"], check["failure"]) == (2, 0, False)
    assert check["status"].startswith("identical up to near-ties")
    wrong_token = {"samples": [{"sample_id": "a", "turns": [turn([1, 2, 3], "p"), turn([4, 5], "q")]},
                               {"sample_id": "b", "turns": [turn([7, 0], "r", wrong)]}]}
    check = equality(cell, wrong_token, reference)
    assert (check["mismatches"], check["failure"]) == (1, True) and check["first_mismatch"]["gap"] == 3.0
    # a difference with no parting found (say, a record from before partings were recorded) stays a mismatch
    unexplained = {"samples": [{"sample_id": "a", "turns": [turn([1, 2, 3], "p"), turn([4, 0], "q")]},
                               {"sample_id": "b", "turns": [turn([7, 8], "r")]}]}
    assert equality(cell, unexplained, reference)["failure"]


def test_a_labelled_none_is_a_second_cell_of_plain_decoding_and_never_the_baseline(tiny_dir, data_files, tmp_path):
    """An A/A cell (`--drafter none:label=none-again`): the same work as `none`, measured beside it, so a run
    says how far two identical cells read apart. Ratios are still taken over the unlabelled `none`."""
    from specdec.benchmarks.cli import parse_drafter

    again = parse_drafter("none:label=none-again")
    assert (again.name, again.options, again.label, again.display) == ("none", {}, "none-again", "none-again")
    assert parse_drafter("anpd:k=3,label=short").options == {"k": 3}
    config = _config(tiny_dir, {"kind": "spec_bench", "path": str(data_files["spec"])}, [again, "none"])
    assert [d.display for d in config.with_none().drafters] == ["none-again", "none"]  # none is there already
    alone = _config(tiny_dir, {"kind": "spec_bench", "path": str(data_files["spec"])}, [again]).with_none()
    assert [d.display for d in alone.drafters] == ["none", "none-again"]  # a labelled none is not the baseline
    cells, records = run_sweep(config, tmp_path, show_progress=False)
    assert all(record["status"] == "ok" for record in records), [r.get("error") for r in records]
    by_label = {cell.label: (cell, record) for cell, record in zip(cells, records)}
    assert by_label["none"][0].cell_id != by_label["none-again"][0].cell_id
    assert _outputs([by_label["none"][1]])[by_label["none"][0].cell_id][0] == \
        _outputs([by_label["none-again"][1]])[by_label["none-again"][0].cell_id][0]  # the same tokens
    summary = {s["label"]: s for s in summarize(cells, records)["cells"]}
    assert summary["none"]["categories"]["overall"]["speedup_vs_none"] == pytest.approx(1.0)  # over itself
    assert summary["none-again"]["categories"]["overall"]["speedup_vs_none"] is not None


def test_issue_21_targets_say_which_misses_lie_within_the_runs_a_a_spread():
    """goodput_targets: with an A/A cell, a missed target is 'within the spread' when its measured value over
    its threshold is no lower than the A/A cell's lowest ratio to `none`; without one the table is as before."""
    from specdec.benchmarks.goodput_targets import AA_LABEL, CATEGORIES, checks

    flat = {c: 1.0 for c in CATEGORIES}
    ratio = {"none": dict(flat), AA_LABEL: {**flat, "qa": 0.95},
             "anpd": {**flat, "mt_bench": 0.94}, "anpd(schedule=constant)": dict(flat),
             "ppd": {**flat, "overall": 0.90}}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in checks(ratio)[2:]}
    assert "| yes (0.969) |" in rows["anpd >= 0.97x none overall and in every category"]  # 0.94 / 0.97 >= 0.95
    assert "| no (0.900) |" in rows["ppd >= 1.0x none overall"]  # 0.90 < 0.95: beyond the spread
    without = checks({k: v for k, v in ratio.items() if k != AA_LABEL})
    assert without[0] == "| target | met | measured |" and all(line.count(" | ") == 2 for line in without[2:])


def test_issue_21_targets_tell_a_miss_from_noise_by_a_paired_bootstrap_over_the_runs_units():
    """goodput_targets: the bootstrap interval of measured over threshold says 'missed' for a cell far below its
    threshold, 'met' for one far above, and 'no' (not told apart) for one whose units straddle it."""
    from specdec.benchmarks.goodput_targets import CATEGORIES, checks, drawn_ratios

    noise = [0, -1, 2, -3, 4, -4, 3, -2, 1, 0]  # ten units per category, mean 0

    def cell(level: float, **per_category: float) -> dict[str, list[float]]:
        return {c: [per_category.get(c, level) + n for n in noise] for c in CATEGORIES[:-1]}

    units = {"none": cell(100.0), "anpd(schedule=constant)": cell(200.0),
             "anpd": {**cell(220.0, mt_bench=150.0), "qa": [192.0 + 12.0 * n for n in noise]}}
    ratio = drawn_ratios(units, {c: list(range(10)) for c in CATEGORIES[:-1]})
    rows = {line.split(" | ")[0].lstrip("| ").split(":")[0]: line.rstrip(" |").rsplit(" | ", 2)
            for line in checks(ratio, units)[2:]}
    assert rows["anpd mt_bench"][2] == "missed" and float(rows["anpd mt_bench"][1].split("-")[1]) < 1.0
    assert rows["anpd translation"][2] == "met"
    assert rows["anpd qa"][2] == "no"  # 192 / 194 on average, units 144-240: not told apart


def _batch_row(batch: int, mode: str, drafter: str, speed: float, repeats: tuple[float, ...] = ()) -> dict:
    """A batching result row; `repeats`: its tokens per CPU-second in each repeat (100 tokens)."""
    return {"batch": batch, "mode": mode, "drafter": drafter, "tokens_per_cpu_second": speed, "tau": 1.0,
            "tokens": 100, "cpu_seconds_all": [100 / speed_r for speed_r in repeats]}


def test_batching_targets_read_each_repeat_paired_with_its_references_and_tell_apart_only_one_sided_misses():
    """batching_targets: each target is also read repeat by repeat over the reference's same repeat; 'missed' (or
    'met') only where every repeat lies on that side of its threshold, 'no' where they straddle it."""
    from specdec.benchmarks.batching_targets import checks, told_apart

    rows = [_batch_row(1, "autoregressive", "none", 100.0, (100.0, 110.0, 90.0)),
            _batch_row(1, "unpadded", "anpd", 94.0, (94.0, 103.0, 85.0)),  # 0.94, 0.936, 0.944 of each AR repeat
            _batch_row(1, "unpadded", "draft_model", 98.0, (90.0, 112.0, 92.0)),  # 0.90, 1.02, 1.02
            _batch_row(1, "unpadded", "oracle@1", 150.0, (150.0, 160.0, 140.0))]
    found = {what.split(" ")[0] + what.split(" ")[3]: repeats for what, _, _, _, repeats in checks(rows)}
    assert found["anpd>="] == pytest.approx([0.94 / 0.97, (103 / 110) / 0.97, (85 / 90) / 0.97])
    assert told_apart(found["anpd>="]) == "missed" and told_apart(found["anpd>"]) == "missed"
    assert told_apart(found["draft_model>="]) == "no"  # 0.90 below 0.97 in one repeat, above in two
    assert told_apart([]) == "-"  # a run without per-repeat times


def test_batching_targets_pool_the_paired_repeats_of_several_runs(tmp_path):
    """batching_targets with other runs: a target's paired readings from every run that has its cell, pooled
    under one name (the oracle's ratio, part of a single run's target text, differs between runs), their mean and a
    bootstrap interval of it; the A/A cell's readings pooled too. Two runs whose sign tests each say 'no' (one
    repeat straddles the threshold) tell a cell apart once pooled."""
    import json

    from specdec.benchmarks.batching import AA_LABEL
    from specdec.benchmarks.batching_targets import main, mean_interval, pooled

    def run(name: str, anpd: tuple[float, ...], oracle: float, batches: tuple[int, ...] = (1,)) -> Path:
        rows = []
        for batch in batches:
            rows += [_batch_row(batch, "autoregressive", "none", 100.0, (100.0,) * len(anpd)),
                     _batch_row(batch, "autoregressive", AA_LABEL, 100.0, (99.0, 101.0) * (len(anpd) // 2)),
                     _batch_row(batch, "unpadded", "anpd", sorted(anpd)[len(anpd) // 2], anpd),
                     _batch_row(batch, "unpadded", "oracle@1", oracle, (oracle,) * len(anpd))]
        folder = tmp_path / name
        folder.mkdir()
        (folder / "result.json").write_text(json.dumps({"command": "test", "repeats": len(anpd), "rows": rows}))
        return folder

    first = run("first", (110.0, 112.0, 96.0, 111.0), 150.0)
    second = run("second", (109.0, 95.0, 112.0, 110.0), 140.0, batches=(1, 2))
    runs = [json.loads((folder / "result.json").read_text())["rows"] for folder in (first, second)]
    found = dict(pooled(runs))
    assert len(found["anpd (unpadded) B=1 > 1.0x static batched plain decoding"]) == 8  # one name, both runs
    assert len(found["anpd (unpadded) B=2 > 1.0x static batched plain decoding"]) == 4  # the second run's alone
    mean, low, high = mean_interval(found["anpd (unpadded) B=1 > 1.0x static batched plain decoding"])
    assert mean == pytest.approx((110 + 112 + 96 + 111 + 109 + 95 + 112 + 110) / 800) and 1.0 < low < mean < high
    assert mean_interval([0.9, 0.9, 0.9]) == pytest.approx((0.9, 0.9, 0.9))
    text = main(first, [second])
    single = (first / "targets.md").read_text()
    assert "| anpd (unpadded) B=1 > 1.0x static batched plain decoding (oracle@1 1.50x there) | yes | 1.110x | | " \
           "0.960-1.120 | no |" in single  # each run alone: one repeat below 1.0
    table = (first / "targets_pooled.md").read_text()
    assert table in text and "A/A: `none-again` over `none`, every repeat at every batch size (12): mean 1.000" in table
    assert f"| anpd (unpadded) B=1 > 1.0x static batched plain decoding | 8 | {mean:.3f} | {low:.3f}-{high:.3f} | " \
           "yes | met |" in table


def test_batching_targets_read_each_cell_over_its_own_protocols_plain_decoding_and_the_a_a_spread_both_ways():
    """batching_targets: static cells over static batched plain decoding, continuous ones over continuous plain
    decoding; '> 1.0x' is asked only where the always-right oracle beats plain decoding; the A/A reading 1.04x
    counts as a 1/1.04 spread, so a 0.94x miss (0.969 of 0.97) is within it and a 0.90x one is not."""
    from specdec.benchmarks.batching import AA_LABEL
    from specdec.benchmarks.batching_targets import aa_low, checks

    rows = [_batch_row(1, "autoregressive", "none", 100.0), _batch_row(1, "autoregressive", AA_LABEL, 104.0),
            _batch_row(1, "continuous", "none", 80.0), _batch_row(1, "unpadded", "anpd", 94.0),
            _batch_row(1, "continuous", "anpd", 82.0), _batch_row(1, "unpadded", "oracle@1", 150.0),
            _batch_row(2, "autoregressive", "none", 100.0), _batch_row(2, "autoregressive", AA_LABEL, 99.0),
            _batch_row(2, "unpadded", "anpd", 90.0), _batch_row(2, "unpadded", "oracle@1", 95.0)]
    assert aa_low(rows) == pytest.approx(1 / 1.04)
    found = {" ".join(what.split(" ")[:4]): (ok, ratio, over) for what, ok, ratio, over, _ in checks(rows)}
    assert found["anpd (unpadded) B=1 >="] == (False, pytest.approx(0.94), pytest.approx(0.94 / 0.97))
    assert found["anpd (continuous) B=1 >="][:2] == (True, pytest.approx(82 / 80))  # over continuous plain decoding
    assert found["anpd (unpadded) B=1 >"][0] is False  # the oracle beats plain decoding at B=1
    assert "anpd (unpadded) B=2 >" not in found  # ... not at B=2 (0.95x)
    assert found["anpd (unpadded) B=2 >="][2] < aa_low(rows) < found["anpd (unpadded) B=1 >="][2]
    assert aa_low([r for r in rows if r["drafter"] != AA_LABEL]) is None
