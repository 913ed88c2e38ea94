"""Checks a `troupe export` file from Python's side of the ecosystem: torch.load reads it
(weights_only, as PyTorch 2.6+ loads by default), and its tensors, in the file's order,
are the values of a `--parameters-out` file (raw fp32, model order) bit for bit.

usage: check_export.py EXPORTED PARAMETERS_OUT
Prints one line of what it compared; exits 1 naming the first tensor that differs."""
import sys

import torch


def main(exported: str, parameters_out: str) -> int:
    state = torch.load(exported, weights_only=True)
    if not isinstance(state, dict) or not state:
        print(f"{exported}: torch.load gave {type(state).__name__}, not a dict of tensors")
        return 1
    with open(parameters_out, "rb") as f:
        flat = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    offset = 0
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
            print(f"{exported}: {name} is {getattr(tensor, 'dtype', type(tensor).__name__)}, not an fp32 tensor")
            return 1
        values = tensor.reshape(-1)
        expected = flat[offset:offset + values.numel()]
        if expected.numel() != values.numel() or not torch.equal(values.view(torch.int32),
                                                                 expected.view(torch.int32)):
            print(f"{exported}: {name} {list(tensor.shape)} differs from {parameters_out} at value {offset}")
            return 1
        offset += values.numel()
    if offset != flat.numel():
        print(f"{exported}: {offset} values, {parameters_out}: {flat.numel()}")
        return 1
    print(f"torch {torch.__version__} loaded {len(state)} tensors ({offset} fp32 values) from {exported}, "
          f"equal to {parameters_out} bit for bit")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
