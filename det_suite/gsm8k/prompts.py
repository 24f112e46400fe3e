"""The prompt format (PROMPT_FORMAT names this version; docs/gsm8k.md shows it) and the
tokenizer side of a run: which tokenizer, which ids stop an output.

A problem becomes one user turn: the question, a newline, then INSTRUCTION (unless the
instruction is turned off). With few-shot exemplars, each exemplar is a user turn (its
question and the instruction) followed by an assistant turn (its reference solution with
GSM8K's `<<expr=value>>` calculator annotations removed), before the problem's turn.

- Chat style, when the tokenizer has a chat template: the turns go through
  `apply_chat_template(..., add_generation_prompt=True, enable_thinking=thinking)`
  (Qwen3's template reads `enable_thinking`; templates that do not use it ignore it).
- Plain style, when it has none: `Question: <turn>\nAnswer: <solution>\n\n` per exemplar,
  then `Question: <turn>\nAnswer:`.

The text is then tokenized without added special tokens (the template already wrote them).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass

PROMPT_FORMAT = "det-suite/gsm8k-prompt/1"
INSTRUCTION = "Solve it step by step, then give the final answer as '#### <number>'."
STYLES = ("auto", "chat", "plain")
_CALCULATOR = re.compile(r"<<[^<>]*>>")


@dataclass(frozen=True)
class PromptOptions:
    style: str = "auto"          # auto: chat when the tokenizer has a template, else plain
    instruction: bool = True
    thinking: bool = False       # passed to the chat template as enable_thinking

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"prompt style: expected one of {', '.join(STYLES)}, "
                             f"got {self.style!r}")


def strip_calculator(solution: str) -> str:
    return _CALCULATOR.sub("", solution)


def resolved_style(tokenizer, options: PromptOptions) -> str:
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if options.style == "chat" and not has_template:
        raise ValueError("prompt style 'chat': the tokenizer has no chat template")
    if options.style == "auto":
        return "chat" if has_template else "plain"
    return options.style


def _turn(question: str, options: PromptOptions) -> str:
    return f"{question}\n{INSTRUCTION}" if options.instruction else question


def prompt_text(tokenizer, question: str, shots=(), options: PromptOptions = PromptOptions()
                ) -> str:
    """The prompt for `question`; `shots`: (question, solution) exemplars, in order."""
    style = resolved_style(tokenizer, options)
    if style == "chat":
        messages = []
        for shot_question, solution in shots:
            messages += [{"role": "user", "content": _turn(shot_question, options)},
                         {"role": "assistant", "content": strip_calculator(solution)}]
        messages.append({"role": "user", "content": _turn(question, options)})
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tokenize=False, enable_thinking=options.thinking)
    text = "".join(f"Question: {_turn(q, options)}\nAnswer: {strip_calculator(s)}\n\n"
                   for q, s in shots)
    return text + f"Question: {_turn(question, options)}\nAnswer:"


def prompt_ids(tokenizer, question: str, shots=(), options: PromptOptions = PromptOptions()
               ) -> tuple[int, ...]:
    text = prompt_text(tokenizer, question, shots, options)
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


# -- the model's tokenizer ---------------------------------------------------------------------

def load_tokenizer(checkpoint):
    """The checkpoint's tokenizer through transformers.AutoTokenizer: its folder's files, or
    for a synthetic model det-suite's synthetic tokenizer (written to a temporary folder and
    loaded the same way)."""
    from transformers import AutoTokenizer

    if checkpoint.tokenizer_path:
        return AutoTokenizer.from_pretrained(checkpoint.tokenizer_path)
    from det_suite.models.spec import is_synthetic

    if is_synthetic(checkpoint.source):
        from det_suite.models.tokenizer import build_tokenizer

        with tempfile.TemporaryDirectory(prefix="det-suite-tokenizer-") as tmp:
            return AutoTokenizer.from_pretrained(build_tokenizer(tmp))
    raise ValueError(f"model {checkpoint.source!r}: no tokenizer files next to the checkpoint "
                     "(tokenizer.json / tokenizer_config.json); GSM8K needs one to make prompts")


def _ids(value) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}


def stop_ids(tokenizer, checkpoint) -> tuple[int, ...]:
    """Ids that end an output: the tokenizer's EOS, the model config's eos_token_id(s) and,
    when the checkpoint folder has one, generation_config.json's."""
    import json
    from pathlib import Path

    ids = _ids(tokenizer.eos_token_id) | _ids(getattr(checkpoint.config, "eos_token_id", None))
    if checkpoint.tokenizer_path:
        generation = Path(checkpoint.tokenizer_path) / "generation_config.json"
        if generation.is_file():
            ids |= _ids(json.loads(generation.read_text()).get("eos_token_id"))
    return tuple(sorted(ids))


def cut_at_stop(ids, stops) -> tuple[tuple[int, ...], bool]:
    """(ids before the first stop id, whether one was found). The engine always decodes
    max_new_tokens (EOS ignored); the output is what precedes the first stop id."""
    stop_set = set(stops)
    for i, token in enumerate(ids):
        if token in stop_set:
            return tuple(ids[:i]), True
    return tuple(ids), False
