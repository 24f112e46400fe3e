"""Shared stand-ins for the GSM8K tests (no tests here): a backend whose outputs are a pure
function of the prompt, and runs made with it on the generated data, no model loaded."""

from functools import lru_cache
from types import SimpleNamespace

from det_suite.backends.interface import Completion
from det_suite.gsm8k.prompts import PromptOptions

MODEL = "synthetic:tiny?seed=0"
EOS = 258          # <|im_end|> in the synthetic tokenizer
# A fixture's platform as an H200 records it: data here, nothing runs on it.
H200_PLATFORM = {"device": "cuda", "interpreter": False, "tile_family": "sm90",
                 "gpu_family": "sm90", "gpu": "NVIDIA H200", "capability": "9.0"}


@lru_cache(maxsize=None)
def tokenizer():
    from det_suite.gsm8k.prompts import load_tokenizer
    return load_tokenizer(checkpoint())


@lru_cache(maxsize=None)
def checkpoint():
    return SimpleNamespace(source=MODEL, tokenizer_path=None,
                           config=SimpleNamespace(eos_token_id=EOS))


class EchoBackend:
    """Answers a prompt of n tokens with "n tokens.\\n#### <n % 7>", then EOS and filler,
    always exactly max_new_tokens ids (as the engine does). `edit(prompt, ids) -> ids`
    changes outputs, to play a backend that computes something else."""

    name = "echo"

    def __init__(self, edit=None):
        self.edit, self.batches, self.closed = edit, [], False

    def generate(self, requests):
        self.batches.append(len(requests))
        out = []
        for r in requests:
            n = len(r.prompt_ids)
            text = f"{n} tokens.\n#### {n % 7}"
            ids = tuple(tokenizer()(text, add_special_tokens=False)["input_ids"]) + (EOS,)
            ids = (ids + (65,) * r.max_new_tokens)[:r.max_new_tokens]
            if self.edit is not None:
                ids = tuple(self.edit(r.prompt_ids, ids))
            out.append(Completion(output_ids=ids, logprobs=(), cached_tokens=0))
        return out

    def flush_cache(self):
        pass

    def close(self):
        self.closed = True


def settings(**overrides):
    from det_suite.gsm8k.run import Gsm8kSettings
    values = dict(model=MODEL, data="synthetic?size=48", rows=tuple(range(32, 37)),
                  max_new_tokens=24, batch_size=2, device="cpu", progress=False,
                  prompt=PromptOptions(instruction=False))
    values.update(overrides)
    return Gsm8kSettings(**values)


def run(backend=None, **overrides):
    from det_suite.gsm8k.run import run_gsm8k
    return run_gsm8k(settings(**overrides), backend=backend or EchoBackend(),
                     checkpoint=checkpoint(), tokenizer=tokenizer())


def run_options(backend=None) -> dict:
    """What check_gsm8k / record_gsm8k pass on to run_gsm8k: the stand-ins."""
    return dict(backend=backend or EchoBackend(), checkpoint=checkpoint(),
                tokenizer=tokenizer())
