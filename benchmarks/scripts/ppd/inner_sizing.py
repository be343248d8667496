"""What ppd_draft_model's inner-loop sizing compares on this machine, for the default draft and its shipped
prompts: per tree size and prompt count, the tree builder's expected tokens per forward (tau), the forward's
inputs, its measured cost over a plain draft forward's, and tokens per plain forward's time; then the choice.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/ppd/inner_sizing.py
"""

from __future__ import annotations

import torch
from specdec.drafters.ppd.draft_model import PPDDraftModelDrafter, PPDDraftModelOptions, inner_shapes
from specdec.drafters.ppd.drafter import PPDDrafter, PPDOptions, checkpoint_accuracies

import specdec
from specdec.runner import row_forward_seconds
from specdec.zoo import default_model_dir


def main() -> None:
    torch.set_num_threads(1)
    pair = specdec.load_default()
    path = f"{default_model_dir()}/ppd_draft_prompts.safetensors"
    checkpoint, _ = PPDDrafter(PPDOptions(checkpoint=path))._checkpoint_for(pair.draft)
    accuracies = checkpoint_accuracies(checkpoint, pair.draft.config.vocab_size)
    seconds = row_forward_seconds(pair.draft)
    plain = seconds(1)
    print(f"plain draft forward {plain * 1e3:.3f} ms; {checkpoint.num_prompts} prompts x {checkpoint.num_ept} EPTs")
    for shape in inner_shapes(accuracies, checkpoint.num_ept):
        cost = seconds(shape.inputs) / plain
        print(f"m={shape.num_prompts} size={shape.tree_size:3d} tau={shape.tau:.3f} inputs={shape.inputs:3d} "
              f"cost={cost:.2f}x plain tokens per plain forward's time={shape.tau / cost:.3f}")
    drafter = PPDDraftModelDrafter(PPDDraftModelOptions())
    specdec.generate(pair.target, [1, 2, 3], drafter=drafter, max_new_tokens=2)
    print("chosen:", drafter.stats()["inner_sizing"])


if __name__ == "__main__":
    main()
