"""Shared fixtures: tiny random models of several architectures and test drafters."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from specdec import DecodeState, Draft, Drafter

VOCAB = 96

# Where `tiny_model` puts its models: the CPU in float32 unless SPECDEC_TEST_DEVICE / SPECDEC_TEST_DTYPE say
# otherwise (`SPECDEC_TEST_DEVICE=cuda SPECDEC_TEST_DTYPE=bfloat16 pytest` runs the suite's models on a GPU in bf16;
# benchmarks/results/cuda/ says what that run found).
TEST_DEVICE = torch.device(os.environ.get("SPECDEC_TEST_DEVICE", "cpu"))
TEST_DTYPE = getattr(torch, os.environ.get("SPECDEC_TEST_DTYPE", "float32"))

#: Marks a test, or a parameter, of a path the runtime takes on a CPU only: int8 weight copies (a CPU kernel;
#: elsewhere asking for them is a clear error, `test_int8_default_needs_the_kernel`), the per-row attention loop
#: (never on CUDA), a PPD size profile written for this CPU. Off the CPU they do not apply.
CPU_ONLY = pytest.mark.skipif(TEST_DEVICE.type != "cpu", reason="a CPU-only path; SPECDEC_TEST_DEVICE is not the CPU")

# Tiny models gain nothing from intra-op threads; one thread keeps parallel test runs from thrashing.
torch.set_num_threads(1)


def tiny_model(arch: str = "llama", vocab: int = VOCAB, layers: int = 2, seed: int = 0, **overrides):
    """A random-init causal LM small enough for unit tests; eos disabled so runs go to max length."""
    torch.manual_seed(seed)
    common = {"vocab_size": vocab, "max_position_embeddings": 256, **overrides}
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                             num_attention_heads=4, num_key_value_heads=2, **common))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                             num_attention_heads=4, num_key_value_heads=2, **common))
    elif arch == "mistral":
        model = MistralForCausalLM(MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                                 num_attention_heads=4, num_key_value_heads=2, sliding_window=None,
                                                 **common))
    elif arch == "gpt2":
        positions = overrides.pop("max_position_embeddings", 256)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=64, n_layer=layers, n_head=4,
                                           n_positions=positions, **overrides))
    else:
        raise ValueError(arch)
    model.to(device=TEST_DEVICE, dtype=TEST_DTYPE).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


ARCHS = ["llama", "qwen2", "mistral", "gpt2"]


def synthetic_costs(extras: tuple[int, ...], seconds: tuple[float, ...]):
    """A cost model whose batch-1 verification curve (packed and not) is `seconds` at `extras` inputs beyond the
    root: what the controller prices with is fixed by the test, not by this machine's timings."""
    from specdec.costs import CostModel, VerifyCurve

    costs = CostModel("synthetic")
    for packed in (True, False):
        costs.live.curves[(packed, 1)] = VerifyCurve(1, extras, seconds)
    return costs


def tiny_tokenizer(vocab: int = VOCAB):
    """A word-level tokenizer over the words t0..t{vocab-1}: real transformers tokenizer, no files."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab)}
    core = Tokenizer(models.WordLevel(vocab=words, unk_token="t0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="t0")


@pytest.fixture(params=ARCHS)
def arch_model(request):
    return tiny_model(request.param)


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
                         min_new_tokens=0)
    return out[0, len(prompt):].tolist()


class OracleDrafter(Drafter):
    """Proposes the true continuation (from a reference run) as a chain of up to `k` tokens."""

    name = "test-oracle"
    description = "test: proposes the known continuation"

    def __init__(self, continuations: dict[int, list[int]], k: int = 5) -> None:
        super().__init__()
        self.continuations = continuations
        self.k = k
        self.prompt_lengths: dict[int, int] = {}

    def setup(self, context) -> None:
        self.prompt_lengths = {row: len(p) for row, p in enumerate(context.prompts)}

    def propose(self, state: DecodeState) -> Draft:
        rows = []
        for row, seq in zip(state.row_ids, state.sequences):
            done = len(seq) - self.prompt_lengths[row]
            guess = self.continuations[row][done : done + self.k]
            rows.append((guess, list(range(-1, len(guess) - 1))))
        return Draft.from_rows(rows)


class RandomTreeDrafter(Drafter):
    """Adversarial: random trees of random tokens (mostly wrong), sometimes empty, sometimes with
    the true next token mixed in when `hint` is given."""

    name = "test-random-tree"
    description = "test: random token trees"

    def __init__(self, vocab: int, seed: int = 0, max_nodes: int = 12) -> None:
        super().__init__()
        self.vocab = vocab
        self.rng = torch.Generator().manual_seed(seed)
        self.max_nodes = max_nodes

    def propose(self, state: DecodeState) -> Draft:
        rows = []
        for _ in state.row_ids:
            n = int(torch.randint(0, self.max_nodes + 1, (1,), generator=self.rng))
            tokens = torch.randint(0, self.vocab, (n,), generator=self.rng).tolist()
            parents = [int(torch.randint(-1, i, (1,), generator=self.rng)) if i else -1 for i in range(n)]
            rows.append((tokens, parents))
        return Draft.from_rows(rows)


class ForwardCounter:
    """Counts forwards of a model (a pre-hook): refusals that must come before any forward assert 0."""

    def __init__(self, model) -> None:
        self.calls = 0
        model.register_forward_pre_hook(self)

    def __call__(self, module, args) -> None:
        self.calls += 1


@pytest.fixture
def one_thread():
    """One torch thread for the test, restored after: tiny models are dispatch-bound, and a second thread
    on a shared CPU makes them 10-40x slower. Modules opt in with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
