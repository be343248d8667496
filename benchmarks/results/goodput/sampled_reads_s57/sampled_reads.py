"""Reads of device data into Python per sampled decoding step (temperature 0.8, seed 1, 16 new tokens, each drafter's
own rule so that every step drafts), on the tiny random Llama of `tests/test_host_reads.py`, for the checkout first
on sys.path: `python sampled_reads.py [REPO]` (REPO: a checkout whose specdec/ holds links to its drafters/,
verifiers/ and benchmarks/, for an older commit; default: the installed one)."""
import sys

if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])
import torch  # noqa: E402
from specdec.benchmarks.host_reads import counting_host_reads  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import specdec  # noqa: E402
from specdec.engine import SpeculativeEngine  # noqa: E402

torch.set_num_threads(1)


def build(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(config).eval()


def reads(target, prompts, drafter, options, verifier):
    step, per_step = SpeculativeEngine._step, []

    def counted(self, *args, **kwargs):
        with counting_host_reads() as counts:
            finished = step(self, *args, **kwargs)
        per_step.append(sum(counts.values()))
        return finished

    SpeculativeEngine._step = counted
    try:
        specdec.generate(target, prompts, drafter=drafter, drafter_options=options, verifier=verifier,
                         max_new_tokens=16, controller=False, temperature=0.8, seed=1)
    finally:
        SpeculativeEngine._step = step
    return per_step


PROMPTS = [[5, 6, 7, 5, 6, 7, 5, 6], [1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [9, 8, 9, 8, 9, 8], [40, 41, 42, 40, 41]]
target = build(0)
print(specdec.__file__)
print("| batch | drafter | verifier | reads per step: mean | max |\n|---|---|---|---|---|")
for batch in (1, 4):
    for drafter, options, verifier in [
            ("none", None, "exact"), ("anpd", None, "exact"), ("anpd", None, "rejection"), ("anpd", None, "typical"),
            ("draft_model", {"model": build(1)}, "exact"), ("draft_model", {"model": build(1)}, "rejection"),
            ("ppd", {"random_init": True, "tree_size": 12}, "exact"),
            ("ppd", {"random_init": True, "tree_size": 12}, "rejection"),
            ("ppd", {"random_init": True, "tree_size": 12}, "typical")]:
        per = reads(target, PROMPTS[:batch], drafter, options, verifier)
        print(f"| {batch} | {drafter} | {verifier} | {sum(per) / len(per):.1f} | {max(per)} |")
