"""The determinism test's layer_skip row (tests/test_determinism.py): its first draft distribution alone and as the last
row of a padded batch of four, with the lean forward's int8 weight copies (bfloat16 activations) and with the float64
model's own weights. Run from the repository root:
`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s60/determinism_int8_q.py`."""
import sys
from unittest import mock

import torch

sys.path.insert(0, "tests")
from conftest import tiny_model  # noqa: E402
from specdec.drafters.layerskip.drafter import LayerSkipDrafter  # noqa: E402

import specdec  # noqa: E402

PROMPT = [5, 6, 7, 5, 6, 7, 5, 6]
OTHERS = [[1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3], [9, 8], [40, 41, 42, 40, 41]]
target = tiny_model("llama").to(torch.float64)
original = LayerSkipDrafter._forward
recorded: list[torch.Tensor] = []


def recording(self, runner, inputs, offset, growing, greedy):
    logits = original(self, runner, inputs, offset, growing, greedy)
    recorded.append(logits.detach().clone())
    return logits


for weights in ("int8", "model"):
    options = {"skip": {"attention": [1], "mlp": [1]}, "max_draft": 4, "draft_weights": weights}
    recorded.clear()

    sampling = dict(drafter="layer_skip", drafter_options=options, verifier="rejection", max_new_tokens=2,
                    temperature=0.9, top_p=0.95, controller=False)
    with mock.patch.object(LayerSkipDrafter, "_forward", recording):
        specdec.generate(target, [PROMPT], seed=[11], **sampling)
        alone = recorded[0][0]
        recorded.clear()
        specdec.generate(target, OTHERS + [PROMPT], seed=[7, 8, 9, 11], batch_mode="padded", **sampling)
        padded = recorded[0][3]
    difference = (alone.float().softmax(-1) - padded.float().softmax(-1)).abs().max().item()
    print(f"draft_weights={weights}: largest difference of the row's first draft distribution {difference:.3g}")
