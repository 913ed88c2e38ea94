"""Hugging Face's side of hf_test: transformers makes, and reads, the folders troupe loads
and exports, for LlamaForCausalLM and GPT2LMHeadModel.

usage: hf_models.py make llama|gpt2 DIR
           a small model with random weights (seeded; 2 layers, width 64, 4 heads,
           vocabulary 320, 64 positions; LLaMA: 2 key/value heads, MLP 96, untied;
           GPT-2: gelu_new, tied) saved by save_pretrained into DIR, and
           DIR/expected.safetensors: tokens [2, 64], the model's logits on them and its
           loss with labels = tokens
       hf_models.py logits DIR TOKENS OUT
           from_pretrained(DIR)'s logits on TOKENS' "tokens" into OUT (safetensors, "logits")
Exits 0 with nothing printed, or 1 with the reason."""
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def build(family: str):
    if family == "llama":
        return LlamaForCausalLM(LlamaConfig(
            vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
            tie_word_embeddings=False, attn_implementation="eager"))
    return GPT2LMHeadModel(GPT2Config(
        vocab_size=320, n_embd=64, n_layer=2, n_head=4, n_positions=64, activation_function="gelu_new",
        layer_norm_epsilon=1e-5, tie_word_embeddings=True, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, attn_implementation="eager"))


def make(family: str, folder: str) -> None:
    torch.manual_seed(20261206)
    model = build(family).eval()
    with torch.no_grad():  # away from the initializer's zeros and ones, so every tensor matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(folder)
    tokens = torch.randint(0, 320, (2, 64), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        out = model(input_ids=tokens, labels=tokens)
    save_file({"tokens": tokens, "logits": out.logits.float().contiguous(), "loss": out.loss.reshape(1)},
              folder + "/expected.safetensors")


def logits(folder: str, tokens_file: str, out: str) -> None:
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokens = load_file(tokens_file)["tokens"]
    with torch.no_grad():
        result = model(input_ids=tokens).logits.float().contiguous()
    save_file({"logits": result}, out)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make" and sys.argv[2] in ("llama", "gpt2"):
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "logits":
        logits(*sys.argv[2:])
    else:
        print(__doc__)
        sys.exit(1)
