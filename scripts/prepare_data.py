#!/usr/bin/env python3
"""Turns text into a megatron-core indexed dataset (PREFIX.bin, PREFIX.idx) that `[data] paths`
reads, tokenized with a Hugging Face tokenizer file.

usage: scripts/prepare_data.py --input FILE [FILE ...] --tokenizer tokenizer.json --output-prefix PREFIX
                               [--json-key text] [--append-eod] [--eod-token TOKEN] [--dtype auto|uint16|int32]
                               [--train-tokenizer VOCAB]

Each document becomes one sequence, as Megatron's preprocess_data.py writes them without
--split-sentences: a line of a .jsonl file (its --json-key string), or a paragraph (lines up to
a blank one) of any other file. Empty documents (no tokens) are left out. --train-tokenizer
first trains a byte-level BPE tokenizer of VOCAB tokens on the inputs with `tokenizers` and
saves it as --tokenizer (for a corpus without a tokenizer of its own). --append-eod ends each document with the tokenizer's
end-of-document token (--eod-token, by default the first of "<|endoftext|>", "</s>", "<eos>" it
knows). The token dtype is uint16 for vocabularies under 65,500 and int32 above (megatron-core's
DType.optimal_dtype), unless --dtype says. The files are byte for byte what megatron-core's
IndexedDatasetBuilder writes for the same tokens (tests/integration/megatron_data_test checks).
Runs in the project's Python environment (scripts/torch-env.sh python), which has `tokenizers`.
Exits 0 after printing what it wrote, or 1 with one sentence naming the file and the problem."""
import argparse
import json
import os
import struct
import sys

import numpy
from tokenizers import Tokenizer

MAGIC = b"MMIDIDX\x00\x00"
DTYPE_CODES = {"uint16": 8, "int32": 4}
EOD_NAMES = ("<|endoftext|>", "</s>", "<eos>")


class Failure(Exception):
    pass


def load_tokenizer(path):
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises its own Exception type for a file that does not parse
        raise Failure(f"tokenizer file '{path}' does not parse as a Hugging Face tokenizer.json: {e}")


def eod_id(tokenizer, name, path):
    names = (name,) if name else EOD_NAMES
    for candidate in names:
        found = tokenizer.token_to_id(candidate)
        if found is not None:
            return found
    raise Failure(f"tokenizer '{path}' has no end-of-document token {' or '.join(repr(n) for n in names)}; "
                  "name one with --eod-token")


def paragraphs(lines):
    paragraph = []
    for line in lines:
        if line.strip():
            paragraph.append(line.rstrip("\n"))
        elif paragraph:
            yield "\n".join(paragraph)
            paragraph = []
    if paragraph:
        yield "\n".join(paragraph)


def documents(path, json_key):
    with open(path, encoding="utf-8") as lines:
        if not path.endswith(".jsonl"):
            yield from paragraphs(lines)
            return
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)[json_key]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise Failure(f"{path}:{number}: not a JSON object with a string under \"{json_key}\" ({e})")
            if not isinstance(text, str):
                raise Failure(f"{path}:{number}: \"{json_key}\" holds {type(text).__name__}, not a string")
            yield text


def write_index(path, code, lengths, itemsize):
    lengths = numpy.asarray(lengths, dtype=numpy.int32)
    pointers = numpy.zeros(len(lengths), dtype=numpy.int64)
    if len(lengths) > 1:
        numpy.cumsum(lengths[:-1].astype(numpy.int64) * itemsize, out=pointers[1:])
    document_indices = numpy.arange(len(lengths) + 1, dtype=numpy.int64)  # one sequence a document
    with open(path, "wb") as idx:
        idx.write(MAGIC)
        idx.write(struct.pack("<Q", 1))
        idx.write(struct.pack("<B", code))
        idx.write(struct.pack("<Q", len(lengths)))
        idx.write(struct.pack("<Q", len(document_indices)))
        idx.write(lengths.tobytes(order="C"))
        idx.write(pointers.tobytes(order="C"))
        idx.write(document_indices.tobytes(order="C"))


def train_tokenizer(args):
    from tokenizers import decoders, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.train_tokenizer, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator((text for path in args.input for text in documents(path, args.json_key)),
                                  trainer)
    tokenizer.save(args.tokenizer)


def prepare(args):
    for path in (args.tokenizer, args.output_prefix):
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
    if args.train_tokenizer:
        if args.train_tokenizer < 257:
            raise Failure(f"--train-tokenizer {args.train_tokenizer}: a byte-level vocabulary needs at least 257 tokens")
        train_tokenizer(args)
    tokenizer = load_tokenizer(args.tokenizer)
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = args.dtype if args.dtype != "auto" else ("uint16" if vocab < 65500 else "int32")
    if dtype == "uint16" and vocab > 65536:
        raise Failure(f"--dtype uint16 cannot hold the ids of a {vocab}-token vocabulary")
    eod = eod_id(tokenizer, args.eod_token, args.tokenizer) if args.append_eod else None
    lengths, tokens = [], 0
    with open(args.output_prefix + ".bin", "wb") as bin_file:
        for path in args.input:
            for text in documents(path, args.json_key):
                ids = tokenizer.encode(text, add_special_tokens=False).ids
                if eod is not None:
                    ids.append(eod)
                if not ids:
                    continue
                bin_file.write(numpy.asarray(ids, dtype=dtype).tobytes(order="C"))
                lengths.append(len(ids))
                tokens += len(ids)
    write_index(args.output_prefix + ".idx", DTYPE_CODES[dtype], lengths, numpy.dtype(dtype).itemsize)
    print(f"wrote {args.output_prefix}.bin and .idx: {len(lengths)} documents, {tokens} tokens of {dtype} "
          f"(vocabulary {vocab})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", nargs="+", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--output-prefix", required=True)
    parser.add_argument("--json-key", default="text")
    parser.add_argument("--append-eod", action="store_true")
    parser.add_argument("--eod-token", default="")
    parser.add_argument("--dtype", choices=("auto", "uint16", "int32"), default="auto")
    parser.add_argument("--train-tokenizer", type=int, default=0, metavar="VOCAB")
    args = parser.parse_args()
    try:
        prepare(args)
    except Failure as e:
        print(f"prepare_data.py: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"prepare_data.py: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
