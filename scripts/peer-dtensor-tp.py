#!/usr/bin/env python3
"""The peer of troupe's tensor parallelism: PyTorch 2.x DTensor (`parallelize_module` with ColwiseParallel and
RowwiseParallel, the vocabulary-parallel embedding and `loss_parallel`) training the same GPT shape as troupe's
built-in one on tp CPU processes over gloo, one thread each. Runs with troupe's own torch (scripts/torch-env.sh)
or the virtualenv PEERS_VENV names, re-executing itself there.

The model, as troupe's GPT: token and learned position embeddings (vocabulary 256), pre-norm blocks of causal
attention and a GELU MLP of width 4h, a final LayerNorm and a bias-free head, untied. q, k and v are three Linear
layers (DTensor's ColwiseParallel splits a layer's output rows evenly, so a fused q/k/v would hand rank 0 all of
q; troupe splits its fused projection per block of three), so each rank attends heads/tp heads. The head's
logits stay split along the vocabulary into loss_parallel's cross-entropy, as troupe's do. Every rank of the
group draws the same batch. AdamW lr 3e-4, fp32. Step 0 warms up and is not timed.

usage: peer-dtensor-tp.py [--tp 2] [--layers 4] [--hidden 256] [--heads 4] [--seq 128] [--micro 8] [--steps 20]
                          [--threads 1]
last line: peer=dtensor-tp tp=T params=P tokens_per_s=X step_ms=Y loss_first=A loss_last=B torch=V
"""
import argparse, math, os, socket, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
# troupe's own torch (scripts/torch-env.sh) unless PEERS_VENV names another environment.
VENV = os.environ.get("PEERS_VENV") or os.popen(f"bash {HERE}/torch-env.sh venv").read().strip()


def into_venv():
    python = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    if not os.path.exists(python):
        sys.exit(f"peer-dtensor-tp: no virtualenv at {VENV}: run scripts/setup.sh first")
    os.execv(python, [python] + sys.argv)


def parse():
    p = argparse.ArgumentParser()
    for k, v in dict(tp=2, layers=4, hidden=256, heads=4, seq=128, micro=8, steps=20, threads=1).items():
        p.add_argument("--" + k, type=int, default=v)
    return p.parse_args()


def build(a, torch):
    nn, F = torch.nn, torch.nn.functional
    width = a.hidden // a.heads

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.ln1, s.ln2 = nn.LayerNorm(a.hidden), nn.LayerNorm(a.hidden)
            s.q, s.k, s.v = (nn.Linear(a.hidden, a.hidden) for _ in range(3))
            s.proj = nn.Linear(a.hidden, a.hidden)
            s.fc, s.out = nn.Linear(a.hidden, 4 * a.hidden), nn.Linear(4 * a.hidden, a.hidden)

        def forward(s, x):
            b, t, _ = x.shape
            y = s.ln1(x)
            # After ColwiseParallel each projection holds this rank's heads: -1 is heads / tp.
            q, k, v = (z.view(b, t, -1, width).transpose(1, 2) for z in (s.q(y), s.k(y), s.v(y)))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(width)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            x = x + s.proj((att @ v).transpose(1, 2).reshape(b, t, -1))
            return x + s.out(F.gelu(s.fc(s.ln2(x))))

    class GPT(nn.Module):
        def __init__(s):
            super().__init__()
            s.tok, s.pos = nn.Embedding(256, a.hidden), nn.Embedding(a.seq, a.hidden)
            s.blocks = nn.Sequential(*[Block() for _ in range(a.layers)])
            s.ln, s.head = nn.LayerNorm(a.hidden), nn.Linear(a.hidden, 256, bias=False)

        def forward(s, idx):
            x = s.tok(idx) + s.pos(torch.arange(idx.shape[1]))
            return s.head(s.ln(s.blocks(x)))

    return GPT()


def parallelize(model, a, torch):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (a.tp,))
    for block in model.blocks:
        parallelize_module(block, mesh, {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
                                         "proj": RowwiseParallel(), "fc": ColwiseParallel(),
                                         "out": RowwiseParallel()})
    parallelize_module(model, mesh, {"tok": RowwiseParallel(input_layouts=Replicate()),
                                     "head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
    return model


def worker(rank, a, port, out):
    import torch, torch.distributed as dist
    from torch.distributed.tensor.parallel import loss_parallel
    torch.set_num_threads(a.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.tp)
    torch.manual_seed(0)
    model = build(a, torch)
    params = sum(p.numel() for p in model.parameters())
    model = parallelize(model, a, torch)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(1)  # the same batch on every rank of the group
    losses, t0 = [], None
    for step in range(a.steps + 1):
        if step == 1:
            dist.barrier()
            t0 = time.time()
        idx = torch.randint(0, 256, (a.micro, a.seq + 1), generator=g)
        logits = model(idx[:, :-1])
        with loss_parallel():
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].reshape(-1))
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    dist.barrier()
    dt = (time.time() - t0) / a.steps
    if rank == 0:
        out.put((params, dt, losses[0], losses[-1], torch.__version__))
    dist.destroy_process_group()


def main():
    into_venv()
    a = parse()
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, port, out)) for r in range(a.tp)]
    for p in procs:
        p.start()
    params, dt, first, last, version = out.get(timeout=3600)
    for p in procs:
        p.join()
    tokens = a.micro * a.seq
    print(f"peer=dtensor-tp tp={a.tp} params={params} tokens_per_s={tokens / dt:.1f} step_ms={dt * 1000:.1f} "
          f"loss_first={first:.4f} loss_last={last:.4f} torch={version}")


if __name__ == "__main__":
    main()
