"""A self-contained tokenizer for synthetic checkpoints, built with the `tokenizers` library.

Byte-level BPE over the 256 byte symbols (no merges), so any text encodes offline and
decodes back to itself, plus Qwen's chat special tokens and a ChatML chat template: checks
that format prompts through `apply_chat_template` run unchanged on a synthetic model. It is
the same file on every machine: nothing is trained, the vocabulary is fixed.
"""

from __future__ import annotations

from pathlib import Path

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# ChatML, the layout Qwen3's template produces for plain user/assistant turns.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tokenizer_object():
    """The `tokenizers.Tokenizer` itself (vocabulary: 256 byte symbols, then the specials)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    for token in SPECIAL_TOKENS:
        vocab[token] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t in SPECIAL_TOKENS])
    return tokenizer


def vocab_size() -> int:
    return build_tokenizer_object().get_vocab_size(with_added_tokens=True)


def build_tokenizer(out_dir) -> Path:
    """Write tokenizer.json and tokenizer_config.json (with the chat template) into out_dir,
    loadable by transformers.AutoTokenizer; returns out_dir."""
    from det_suite.reports.files import write_json_atomic, write_text_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "tokenizer.json", build_tokenizer_object().to_str(pretty=True))
    write_json_atomic(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "bos_token": None,
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 40960,
    })
    return out


def special_token_ids() -> dict[str, int]:
    tokenizer = build_tokenizer_object()
    return {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}


__all__ = ["build_tokenizer", "build_tokenizer_object", "vocab_size", "special_token_ids",
           "CHAT_TEMPLATE"]
