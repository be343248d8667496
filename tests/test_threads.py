"""Two threads generate at once on one shared model: the runtime keeps its per-forward state with the forward
(no thread-local or module state decides how a forward attends) and never rewrites the user's model or
config, so each thread's outputs are its greedy reference."""

from __future__ import annotations

import json
import threading

from conftest import hf_greedy, tiny_model

import specdec

PROMPTS = [[[5, 6, 7, 5, 6, 7, 5, 6], [1, 2, 3]], [[9, 8, 9, 8, 9, 8, 9], [40, 41, 42, 40, 41, 42, 40, 41, 42]]]
NEW = 16
ROUNDS = 3


def test_two_threads_share_one_model_and_never_touch_its_config():
    model = tiny_model("qwen2")
    draft = tiny_model("qwen2", layers=1, seed=1)
    expected = [[hf_greedy(model, p, NEW) for p in batch] for batch in PROMPTS]
    config = json.dumps(model.config.to_dict(), sort_keys=True, default=str)
    implementation = model.config._attn_implementation
    seen: list[str] = []  # what the config looked like at every forward of the model's modules

    def check(module, args, kwargs):
        now = json.dumps(model.config.to_dict(), sort_keys=True, default=str)
        seen.append("same" if now == config and model.config._attn_implementation == implementation else now)

    handles = [module.register_forward_pre_hook(check, with_kwargs=True)
               for module in (model, model.model.layers[0].self_attn)]
    outputs: dict[int, list[list[list[int]]]] = {0: [], 1: []}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run(index: int) -> None:
        try:
            start.wait()
            drafter, options = ("anpd", None) if index == 0 else ("draft_model", {"model": draft})
            for _ in range(ROUNDS):
                out = specdec.generate(model, PROMPTS[index], drafter=drafter, drafter_options=options,
                                       verifier="exact", max_new_tokens=NEW, controller=False)
                outputs[index].append(out.sequences)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for handle in handles:
        handle.remove()
    assert not errors, errors
    assert seen and all(state == "same" for state in seen), next(s for s in seen if s != "same")
    for index in (0, 1):
        assert outputs[index] == [expected[index]] * ROUNDS
