"""A tiny random Llama model folder with a byte-level tokenizer, and LoRA adapters for it.

Unit tests of the engine's scheduler run on it in well under a second a
request; the real default model is for the integration tests over HTTP.
"""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                  unk_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": SPECIALS})
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(out))
    return tok


def make_model(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(out)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), bos_token_id=None,
                         pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # sharper logits than the default init, so greedy choices are far from ties
        model.model.embed_tokens.weight.mul_(4)
    model.save_pretrained(str(out), safe_serialization=True)
    return out


def make_adapter(model_dir: Path, out: Path, seed: int, fresh: bool = False) -> Path:
    """A LoRA adapter with non-zero B, so it visibly changes the base model's outputs (``fresh``: B = 0,
    as a new adapter starts, which computes the base model)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(model_dir))
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                        init_lora_weights=fresh, task_type="CAUSAL_LM")
    peft_model = get_peft_model(base, config)
    peft_model.save_pretrained(str(out))
    return out
