"""Re-measure the goodput entry of the shipped PPD profile for this device (what `specdec profile` stores as "goodput":
the prompt count and ensemble width the goodput controller runs fastest with, now timed on GOODPUT_PER_CATEGORY prompts
of each Spec-Bench category at GOODPUT_TOKENS tokens) without re-timing the tree-size curves, and write it into the
profile. From the repo root, with one torch thread (the profile's device key):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/ppd_look_s54/remeasure_goodput_choice.py
"""
import json
import time

import torch
from specdec.drafters.ppd.drafter import default_checkpoint_path, profile_path_for
from specdec.drafters.ppd.profile import load_profile
from specdec.drafters.ppd.prompts import PromptCheckpoint

import specdec
from specdec.runner import device_key
from specdec.target import context_length
from specdec.tools.ppd.profile import (
    GOODPUT_PER_CATEGORY,
    GOODPUT_TOKENS,
    benchmark_prompts,
    goodput_candidates,
    measure_goodput,
    save_profile,
)

torch.set_num_threads(1)
pair = specdec.load_default()
model = pair.target
path = default_checkpoint_path()
checkpoint = PromptCheckpoint.load(path)
prompts = benchmark_prompts(pair.tokenizer, context_length(model), GOODPUT_TOKENS, GOODPUT_PER_CATEGORY)
choice = measure_goodput(model, path, prompts, goodput_candidates(checkpoint.num_prompts, checkpoint.num_ept))
choice["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
profile_file = profile_path_for(path)
key = device_key(model.get_input_embeddings().weight.device)
entry = load_profile(profile_file)["devices"][key]
previous = entry.get("goodput")
save_profile(profile_file, checkpoint.fingerprint, key, {**entry, "goodput": choice})
print(json.dumps({"device": key, "previous": previous, "now": choice}, indent=1))
