#!/usr/bin/env python3
"""The peer of scripts/bench-llama.sh: transformers' LlamaForCausalLM trained by PyTorch 2.x
on CPU processes over gloo, with DistributedDataParallel (--mode ddp) or FSDP2 (--mode
fsdp2: fully_shard on each decoder layer, then the root; ZeRO-3's sharding), AdamW lr
3e-4, fp32, random tokens; the shape of troupe's bench job (RMSNorm, rotary embeddings,
SwiGLU with transformers' own MLP width argument, grouped-query attention through its
default attention, scaled_dot_product_attention). Step 0 warms up and is not timed.

usage: peer-llama.py [--ranks 2] [--mode ddp|fsdp2] [--layers 4] [--hidden 256] [--heads 4]
                     [--kv-heads 2] [--ffn 768] [--vocab 256] [--seq 128] [--micro 8]
                     [--steps 30] [--threads 1]
last line: peer=llama mode=M ranks=R params=P tokens_per_s=T step_ms=S loss_first=A loss_last=B"""
import argparse
import os
import socket
import time


def parse():
    p = argparse.ArgumentParser()
    for name, default in dict(ranks=2, layers=4, hidden=256, heads=4, kv_heads=2, ffn=768, vocab=256, seq=128,
                              micro=8, steps=30, threads=1).items():
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=default)
    p.add_argument("--mode", default="ddp", choices=["ddp", "fsdp2"])
    return p.parse_args()


def worker(rank, a, port):
    import torch
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(a.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=a.seq,
        rms_norm_eps=1e-5, tie_word_embeddings=False, use_cache=False))
    params = sum(p.numel() for p in model.parameters())
    if a.mode == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (a.ranks,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    generator = torch.Generator().manual_seed(1 + rank)
    losses, start = [], None
    for step in range(a.steps + 1):
        if step == 1:
            dist.barrier()
            start = time.time()
        tokens = torch.randint(0, a.vocab, (a.micro, a.seq + 1), generator=generator)
        logits = model(input_ids=tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    dist.barrier()
    seconds = (time.time() - start) / a.steps
    if rank == 0:
        print(f"peer=llama mode={a.mode} ranks={a.ranks} params={params} "
              f"tokens_per_s={a.ranks * a.micro * a.seq / seconds:.1f} step_ms={seconds * 1e3:.1f} "
              f"loss_first={losses[0]:.4f} loss_last={losses[-1]:.4f}", flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    import torch.multiprocessing as mp
    args = parse()
    mp.spawn(worker, args=(args, free_port()), nprocs=args.ranks)
