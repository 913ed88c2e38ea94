"""Hugging Face's side of hf_test: transformers' LlamaForCausalLM makes, and reads, the
folders troupe loads and exports.

usage: hf_llama.py make DIR          a small LLaMA with random weights (seeded: 2 layers,
                                     d 64, 4 heads over 2 key/value heads, vocabulary 320,
                                     untied) saved by save_pretrained into DIR, and
                                     DIR/expected.safetensors: tokens [2, 64], the model's
                                     logits on them and its loss with labels = tokens
       hf_llama.py logits DIR TOKENS OUT
                                     from_pretrained(DIR)'s logits on TOKENS' "tokens" into
                                     OUT (safetensors, "logits")
Exits 0 with nothing printed, or 1 with the reason."""
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM


def make(folder: str) -> None:
    torch.manual_seed(20261206)
    config = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                         attn_implementation="eager")
    model = LlamaForCausalLM(config).eval()
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
    model = LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokens = load_file(tokens_file)["tokens"]
    with torch.no_grad():
        result = model(input_ids=tokens).logits.float().contiguous()
    save_file({"logits": result}, out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "logits":
        logits(*sys.argv[2:])
    else:
        print(__doc__)
        sys.exit(1)
