"""The GSM8K prompt format (docs/gsm8k.md) on the synthetic tokenizer, and stop handling."""

from types import SimpleNamespace

import pytest

pytest.importorskip("transformers", reason="needs transformers (pip install 'det-suite[model]')")

from det_suite.gsm8k.prompts import (INSTRUCTION, PromptOptions, cut_at_stop,  # noqa: E402
                                     load_tokenizer, prompt_ids, prompt_text, stop_ids,
                                     strip_calculator)

SHOT = ("Ava has 2 apples and buys 3. How many?", "2+3 = <<2+3=5>>5.\n#### 5")


@pytest.fixture(scope="module")
def synthetic():
    return SimpleNamespace(source="synthetic:tiny?seed=0", tokenizer_path=None,
                           config=SimpleNamespace(eos_token_id=258))


@pytest.fixture(scope="module")
def tokenizer(synthetic):
    return load_tokenizer(synthetic)


class _Plain:
    """A tokenizer without a chat template: one id per byte."""
    chat_template = None
    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": list(text.encode())}


def test_chat_style_is_one_user_turn_with_the_instruction(tokenizer):
    assert prompt_text(tokenizer, "What is 2+2?") == (
        f"<|im_start|>user\nWhat is 2+2?\n{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n")


def test_chat_style_without_the_instruction_is_the_question_alone(tokenizer):
    text = prompt_text(tokenizer, "What is 2+2?", options=PromptOptions(instruction=False))
    assert text == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"


def test_chat_shots_are_user_and_assistant_turns_without_calculator_marks(tokenizer):
    text = prompt_text(tokenizer, "Q?", shots=[SHOT], options=PromptOptions(instruction=False))
    assert text == ("<|im_start|>user\nAva has 2 apples and buys 3. How many?<|im_end|>\n"
                    "<|im_start|>assistant\n2+3 = 5.\n#### 5<|im_end|>\n"
                    "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n")


def test_plain_style_when_the_tokenizer_has_no_template():
    text = prompt_text(_Plain(), "Q?", shots=[SHOT])
    assert text == (f"Question: {SHOT[0]}\n{INSTRUCTION}\nAnswer: 2+3 = 5.\n#### 5\n\n"
                    f"Question: Q?\n{INSTRUCTION}\nAnswer:")


def test_plain_style_can_be_chosen_over_a_template(tokenizer):
    text = prompt_text(tokenizer, "Q?", options=PromptOptions(style="plain", instruction=False))
    assert text == "Question: Q?\nAnswer:"


def test_chat_style_needs_a_template():
    with pytest.raises(ValueError, match="no chat template"):
        prompt_text(_Plain(), "Q?", options=PromptOptions(style="chat"))


def test_an_unknown_style_is_refused():
    with pytest.raises(ValueError, match="prompt style"):
        PromptOptions(style="fancy")


def test_prompt_ids_add_no_special_tokens_of_their_own(tokenizer):
    ids = prompt_ids(tokenizer, "Hi", options=PromptOptions(instruction=False))
    text = tokenizer.decode(list(ids))
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_strip_calculator():
    assert strip_calculator("48/2 = <<48/2=24>>24 clips") == "48/2 = 24 clips"


@pytest.mark.parametrize("ids, stops, kept, stopped", [
    ((5, 6, 9, 7), (9,), (5, 6), True),
    ((9, 5), (9,), (), True),
    ((5, 6), (9,), (5, 6), False),
    ((5, 8, 9), (9, 8), (5,), True),
], ids=["cut-before-stop", "stop-first", "no-stop", "first-of-several-stops"])
def test_cut_at_stop(ids, stops, kept, stopped):
    assert cut_at_stop(ids, stops) == (kept, stopped)


def test_stop_ids_join_tokenizer_config_and_generation_config(tmp_path, tokenizer):
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [7, 258]}')
    ckpt = SimpleNamespace(config=SimpleNamespace(eos_token_id=[3, 258]),
                           tokenizer_path=str(tmp_path))
    assert stop_ids(tokenizer, ckpt) == (3, 7, 258)


def test_a_model_without_tokenizer_files_is_refused():
    ckpt = SimpleNamespace(source="/models/x", tokenizer_path=None)
    with pytest.raises(ValueError, match="no tokenizer files"):
        load_tokenizer(ckpt)
