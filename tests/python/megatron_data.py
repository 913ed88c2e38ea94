"""megatron-core's side of megatron_data_test: its IndexedDatasetBuilder writes datasets troupe
reads, its IndexedDataset reads what troupe's preparer writes, and its blending helper says which
dataset each sample of a blend comes from.

usage: megatron_data.py build PREFIX
           a uint16 dataset of seeded random documents (some of several sequences) written by
           IndexedDatasetBuilder, and PREFIX.tokens.json: its sequences as lists of tokens
       megatron_data.py read PREFIX OUT
           IndexedDataset(PREFIX)'s sequences as lists of tokens into OUT (JSON)
       megatron_data.py prepare SCRIPT DIR
           a tokenizer.json trained here and a JSONL corpus in DIR; SCRIPT (scripts/prepare_data.py)
           writes DIR/troupe.{bin,idx}, IndexedDatasetBuilder writes DIR/megatron.{bin,idx} from the
           same tokens; the two must be byte-identical, and IndexedDataset must read troupe's as
           the tokens. DIR/troupe.tokens.json: the documents' tokens
       megatron_data.py blend N OUT W1 W2 ...
           megatron-core's build_blending_indices for weights W over N samples: the dataset of each
           sample into OUT (JSON)
Exits 0 with nothing printed, or 1 with the reason."""
import json
import logging
import os
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import numpy  # noqa: E402
import torch  # noqa: E402
from megatron.core.datasets import helpers_cpp  # noqa: E402
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder  # noqa: E402


def sequences_of(prefix):
    dataset = IndexedDataset(prefix)
    return [dataset[i].tolist() for i in range(len(dataset))]


def build(prefix):
    rng = numpy.random.default_rng(20261206)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    sequences = []
    for document in range(40):
        parts = 1 if document % 5 else 3  # every fifth document holds three sequences
        for _ in range(parts):
            tokens = rng.integers(0, 320, size=int(rng.integers(0, 90)), dtype=numpy.int64)
            builder.add_item(torch.from_numpy(tokens))
            sequences.append(tokens.tolist())
        builder.end_document()
    builder.finalize(prefix + ".idx")
    with open(prefix + ".tokens.json", "w") as out:
        json.dump(sequences, out)


TEXTS = [
    "The troupe runtime trains models across many machines.",
    "Pipeline stages pass activations forward and gradients back.",
    "",
    "ZeRO shards the optimizer state, the gradients and the parameters.",
    "Unicode too: naïve café — 東京 🚀",
] * 30


def make_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(TEXTS, trainer)
    tokenizer.save(path)
    return tokenizer


def prepare(script, folder):
    tokenizer = make_tokenizer(os.path.join(folder, "tokenizer.json"))
    corpus = os.path.join(folder, "corpus.jsonl")
    with open(corpus, "w") as out:
        for text in TEXTS:
            out.write(json.dumps({"text": text}) + "\n")
    troupe = os.path.join(folder, "troupe")
    run = subprocess.run([sys.executable, script, "--input", corpus, "--tokenizer",
                          os.path.join(folder, "tokenizer.json"), "--output-prefix", troupe, "--append-eod"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{script} failed: {run.stderr.strip()}")
    eod = tokenizer.token_to_id("<|endoftext|>")
    megatron = os.path.join(folder, "megatron")
    builder = IndexedDatasetBuilder(megatron + ".bin", dtype=numpy.uint16)
    documents = []
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False).ids + [eod]
        builder.add_document(torch.tensor(ids), [len(ids)])
        documents.append(ids)
    builder.finalize(megatron + ".idx")
    for suffix in (".bin", ".idx"):
        with open(troupe + suffix, "rb") as a, open(megatron + suffix, "rb") as b:
            if a.read() != b.read():
                raise SystemExit(f"troupe's {suffix} differs from megatron-core's for the same tokens")
    if sequences_of(troupe) != documents:
        raise SystemExit("IndexedDataset reads troupe's dataset as other tokens than the documents'")
    with open(troupe + ".tokens.json", "w") as out:
        json.dump(documents, out)


def blend(samples, out, weights):
    weights = numpy.array(weights, dtype=numpy.float64)
    weights /= weights.sum()
    dataset_index = numpy.zeros(samples, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(samples, dtype=numpy.int64)
    helpers_cpp.build_blending_indices(dataset_index, dataset_sample_index, weights, len(weights), samples, False)
    with open(out, "w") as f:
        json.dump({"dataset": dataset_index.tolist(), "index": dataset_sample_index.tolist()}, f)


def main(argv):
    if argv[1] == "build":
        build(argv[2])
    elif argv[1] == "read":
        with open(argv[3], "w") as out:
            json.dump(sequences_of(argv[2]), out)
    elif argv[1] == "prepare":
        prepare(argv[2], argv[3])
    elif argv[1] == "blend":
        blend(int(argv[2]), argv[3], [float(w) for w in argv[4:]])
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
