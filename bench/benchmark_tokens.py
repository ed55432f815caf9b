"""The GPU benchmark's token file: the same ids for ptrain, the PyTorch baseline and llm.c.

Token i (i = 0, 1, ...) is splitmix64's i-th output from the state `seed`, modulo the vocabulary:
    state_i = seed + (i + 1) * 0x9E3779B97F4A7C15  (mod 2^64)
    z = state_i; z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9; z = (z ^ z >> 27) * 0x94D049BB133111EB
    token_i = (z ^ z >> 31) mod vocab
i.e. uniform over the whole vocabulary (bias below vocab / 2^64), the same on every machine.

Written where every implementation reads it:
  vocab <= 65536: one llm.c shard, PATH (1024-byte header: 20240520, 1, n; then n uint16)
                  -> ptrain data.format: llmc, llm.c -i/-j, the baseline's --tokens PATH
  larger (Llama 3's 128,256): a Megatron indexed dataset, PATH.idx + PATH.bin (int32 tokens, one
                  sequence, one document) -> ptrain data.format: megatron (data.train: PATH)
Sample i is tokens [i*T, i*T + T] (inputs the first T, targets the last T) in both, as ptrain's
readers cut them; read_samples() below cuts them the same way for the baseline.

  python3 bench/benchmark_tokens.py --vocab 50257 --count 4194305 --out bench/out/tokens/gpt2-124m.bin
"""
import argparse
import hashlib
import json
import os
import struct
import sys

LLMC_MAGIC, LLMC_VERSION, LLMC_HEADER_BYTES = 20240520, 1, 1024
MEGATRON_MAGIC, MEGATRON_INT32 = b"MMIDIDX\x00\x00", 4
MEGATRON_HEADER_BYTES = 34  # magic, version u64, dtype u8, sequences u64, documents u64
UINT16_IDS = 1 << 16
GOLDEN, MIX1, MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def token_ids(vocab, count, seed):
    """The definition above, vectorised (numpy's uint64 arithmetic wraps mod 2^64)."""
    import numpy as np
    u = np.uint64
    z = u(seed) + np.arange(1, count + 1, dtype=u) * u(GOLDEN)
    z = (z ^ (z >> u(30))) * u(MIX1)
    z = (z ^ (z >> u(27))) * u(MIX2)
    return (z ^ (z >> u(31))) % u(vocab)


def is_llmc(vocab):
    return vocab <= UINT16_IDS


def written_files(path, vocab):
    """The file(s) that hold the tokens: the shard, or the Megatron pair."""
    return [path] if is_llmc(vocab) else [path + ".idx", path + ".bin"]


def write(path, vocab, count, seed):
    """Writes the token file(s) for `path` (a shard path, or a Megatron prefix); returns a
    description: format, what ptrain's data.train names, the files, their sha256."""
    ids = token_ids(vocab, count, seed)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if is_llmc(vocab):
        with open(path, "wb") as f:
            f.write(struct.pack("<3i", LLMC_MAGIC, LLMC_VERSION, count).ljust(LLMC_HEADER_BYTES, b"\0"))
            f.write(ids.astype("<u2").tobytes())
    else:
        with open(path + ".bin", "wb") as f:
            f.write(ids.astype("<i4").tobytes())
        with open(path + ".idx", "wb") as f:
            f.write(MEGATRON_MAGIC + struct.pack("<QBQQ", 1, MEGATRON_INT32, 1, 2))
            f.write(struct.pack("<iqqq", count, 0, 0, 1))  # sizes[1], pointers[1], doc_idx[2]
    return describe(path, vocab, count, seed)


def describe(path, vocab, count, seed):
    files = written_files(path, vocab)
    return {"format": "llmc" if is_llmc(vocab) else "megatron", "data_train": path, "files": files,
            "sha256": {os.path.basename(f): file_sha256(f) for f in files},
            "tokens": count, "ids_uniform_below": vocab, "seed": seed,
            "definition": "bench/benchmark_tokens.py: splitmix64(seed)'s i-th output mod vocab"}


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _token_view(path):
    """(raw bytes of the tokens, numpy dtype) of a shard or a Megatron prefix, header checked."""
    if os.path.exists(path + ".idx"):
        with open(path + ".idx", "rb") as f:
            head = f.read(MEGATRON_HEADER_BYTES)
        if len(head) < MEGATRON_HEADER_BYTES or head[:9] != MEGATRON_MAGIC:
            raise SystemExit("error: %s.idx is not a Megatron index" % path)
        dtype = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2"}.get(head[17])
        if dtype is None:
            raise SystemExit("error: %s.idx: unsupported dtype code %d" % (path, head[17]))
        with open(path + ".bin", "rb") as f:
            return f.read(), dtype
    with open(path, "rb") as f:
        data = f.read()
    magic, version, count = struct.unpack_from("<3i", data) if len(data) >= 12 else (0, 0, 0)
    if (magic, version) != (LLMC_MAGIC, LLMC_VERSION) or len(data) != LLMC_HEADER_BYTES + 2 * count:
        raise SystemExit("error: %s is not an llm.c shard of uint16 tokens (header %d %d %d, %d bytes)"
                         % (path, magic, version, count, len(data)))
    return data[LLMC_HEADER_BYTES:], "<u2"


def token_count(path):
    """The tokens of a shard or Megatron prefix, its header checked."""
    raw, dtype = _token_view(path)
    return len(raw) // int(dtype[-1])  # the dtype's bytes: "<u2", "<i4", "u1", ...


def read_samples(path, seq_len):
    """Every sample of the file in file order, as an int64 array [samples, seq_len + 1]: row i is
    tokens [i*T, i*T + T], the sample ptrain's readers number i."""
    import numpy as np
    raw, dtype = _token_view(path)
    tokens = np.frombuffer(raw, dtype=dtype)
    samples = (len(tokens) - 1) // seq_len
    if samples < 1:
        raise SystemExit("error: %s holds %d tokens, a sample needs %d" % (path, len(tokens), seq_len + 1))
    starts = np.arange(samples, dtype=np.int64)[:, None] * seq_len
    return tokens[starts + np.arange(seq_len + 1, dtype=np.int64)[None, :]].astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, required=True, help="ids are drawn from [0, vocab)")
    ap.add_argument("--count", type=int, required=True, help="tokens to write")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", required=True, help="the shard's path (vocab <= 65536), else the Megatron prefix")
    args = ap.parse_args()
    if not 1 <= args.vocab <= 1 << 31 or args.count < 2 or not 0 <= args.seed < 1 << 64:
        raise SystemExit("error: need 1 <= --vocab <= 2^31, --count >= 2, 0 <= --seed < 2^64")
    print(json.dumps(write(args.out, args.vocab, args.count, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
