#!/usr/bin/env node
// Tokenise text with GPT-2 BPE into llm.c token shards (the format engine/data/llmc_dataset.h reads).
//
//   node scripts/prepare_data.mjs --input <file or dir>... --out data/tiny [--val-fraction 0.05]
//        [--shard-tokens 100000000] [--seed 1234] [--vocab-check]
//   node scripts/prepare_data.mjs --vocab-check --out data/tiny      # only verify what is there
//
// Input: files, or directories walked recursively (sorted by path; symlinks to a file already seen
// are read once; binary files such as fortune's .dat indexes are skipped). A file in fortune format
// (entries separated by lines holding only "%") gives one document per entry; any other file is one
// document. Leading blank lines and trailing whitespace of a document are dropped; empty ones are
// skipped.
//
// Output in --out: train_000000.bin, train_000001.bin, ... (each --shard-tokens tokens, the last
// one shorter) and val.bin, then manifest.json (written last: its presence means complete). Every
// shard: int32 header[256] = {20240520, 1, token count, 0...}, then uint16 tokens, little-endian.
// As in llm.c, every document is preceded by GPT-2's <|endoftext|> (50256), which therefore also
// separates documents. A document goes to val.bin when a hash of its text (FNV-1a, keyed by
// --seed) falls below --val-fraction, so the split does not depend on input order and duplicate
// documents never straddle it.
//
// --vocab-check re-reads every shard listed in manifest.json and checks its header, its size and
// that every token is < 50257; exit status 1 if anything is wrong or missing.
//
// The tokenizer is gpt-tokenizer (pinned in scripts/package.json; run `npm ci --prefix scripts`):
// its GPT-2 ranks ship inside the package, nothing is downloaded at run time.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import process from 'node:process';

const MAGIC = 20240520;
const VERSION = 1;
const HEADER_INTS = 256;
const HEADER_BYTES = HEADER_INTS * 4;
const GPT2_VOCAB = 50257;
const EOT = 50256;
const MAX_SHARD_TOKENS = 2 ** 31 - 1;  // header[2] is an int32

class UsageError extends Error {}

function usage() {
  return `usage: node scripts/prepare_data.mjs --input <file or dir>... --out <dir> [options]
       node scripts/prepare_data.mjs --vocab-check --out <dir>
options:
  --val-fraction F    share of documents written to val.bin (default 0.05; 0 = no val.bin)
  --shard-tokens N    tokens per train shard (default 100000000, at most ${MAX_SHARD_TOKENS})
  --seed S            key of the train/val split hash (default 1234)
  --vocab-check       after writing (or alone: instead of writing), verify every shard in --out
  --quiet             print only the summary`;
}

function parseArgs(argv) {
  const opts = {inputs: [], out: null, valFraction: 0.05, shardTokens: 100_000_000, seed: 1234,
                vocabCheck: false, quiet: false, help: false};
  const takeValue = (i, name) => {
    if (i + 1 >= argv.length || argv[i + 1].startsWith('--')) throw new UsageError(`${name} needs a value`);
    return argv[i + 1];
  };
  for (let i = 0; i < argv.length; ++i) {
    let arg = argv[i];
    let inline = null;
    if (arg.startsWith('--') && arg.includes('=')) {
      inline = arg.slice(arg.indexOf('=') + 1);
      arg = arg.slice(0, arg.indexOf('='));
    }
    const value = () => {
      if (inline !== null) return inline;
      return takeValue(i++, arg);
    };
    switch (arg) {
      case '--input':
        if (inline !== null) opts.inputs.push(inline);
        while (inline === null && i + 1 < argv.length && !argv[i + 1].startsWith('--')) opts.inputs.push(argv[++i]);
        break;
      case '--out': opts.out = value(); break;
      case '--val-fraction': opts.valFraction = Number(value()); break;
      case '--shard-tokens': opts.shardTokens = Number(value()); break;
      case '--seed': opts.seed = Number(value()); break;
      case '--vocab-check': opts.vocabCheck = true; break;
      case '--quiet': opts.quiet = true; break;
      case '--help': case '-h': opts.help = true; break;
      default: throw new UsageError(`unknown argument ${JSON.stringify(argv[i])}`);
    }
  }
  if (opts.help) return opts;
  if (!opts.out) throw new UsageError('--out <dir> is required');
  if (opts.inputs.length === 0 && !opts.vocabCheck) throw new UsageError('--input <file or dir>... is required');
  if (!(opts.valFraction >= 0 && opts.valFraction < 1)) {
    throw new UsageError(`--val-fraction: expected a number in [0, 1), got ${opts.valFraction}`);
  }
  if (!Number.isInteger(opts.shardTokens) || opts.shardTokens < 1 || opts.shardTokens > MAX_SHARD_TOKENS) {
    throw new UsageError(`--shard-tokens: expected an integer in [1, ${MAX_SHARD_TOKENS}], got ${opts.shardTokens}`);
  }
  if (!Number.isInteger(opts.seed) || opts.seed < 0) {
    throw new UsageError(`--seed: expected a non-negative integer, got ${opts.seed}`);
  }
  return opts;
}

// ---------------------------------------------------------------- input files and documents

function listInputFiles(inputs) {
  const files = [];
  const seen = new Set();
  const visit = (p) => {
    let st;
    try {
      st = fs.statSync(p);  // follows symlinks
    } catch (err) {
      throw new UsageError(`--input ${p}: ${err.code === 'ENOENT' ? 'no such file or directory' : err.message}`);
    }
    if (st.isDirectory()) {
      const names = fs.readdirSync(p).filter((n) => !n.startsWith('.')).sort();
      for (const name of names) visit(path.join(p, name));
    } else if (st.isFile()) {
      const real = fs.realpathSync(p);
      if (!seen.has(real)) {
        seen.add(real);
        files.push(p);
      }
    }
  };
  for (const input of inputs) visit(input);
  return files;
}

function isBinary(bytes) {
  const n = Math.min(bytes.length, 65536);
  for (let i = 0; i < n; ++i) {
    if (bytes[i] === 0) return true;
  }
  return false;
}

function* documentsOf(text) {
  const lines = text.replace(/\r\n/g, '\n').split('\n');
  const fortune = lines.some((l) => l === '%');
  const clean = (doc) => doc.replace(/^\n+/, '').replace(/\s+$/, '');
  if (!fortune) {
    const doc = clean(lines.join('\n'));
    if (doc) yield doc;
    return;
  }
  let current = [];
  for (const line of lines) {
    if (line === '%') {
      const doc = clean(current.join('\n'));
      if (doc) yield doc;
      current = [];
    } else {
      current.push(line);
    }
  }
  const doc = clean(current.join('\n'));
  if (doc) yield doc;
}

// FNV-1a over the UTF-8 bytes, keyed by the seed; uniform enough to pick a split.
function splitHash(text, seed) {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (const byte of Buffer.from(text, 'utf8')) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  // A final avalanche so that similar texts do not land in neighbouring buckets.
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  return (h >>> 0) / 2 ** 32;
}

// ---------------------------------------------------------------- shards

function shardBytes(tokens) {
  const buf = Buffer.alloc(HEADER_BYTES + tokens.length * 2);
  buf.writeInt32LE(MAGIC, 0);
  buf.writeInt32LE(VERSION, 4);
  buf.writeInt32LE(tokens.length, 8);
  // Uint16Array is host-endian; main() insists on a little-endian host.
  Buffer.from(tokens.buffer, tokens.byteOffset, tokens.length * 2).copy(buf, HEADER_BYTES);
  return buf;
}

// Writes via a temporary name and a rename, so a crash never leaves a half shard under its name.
function writeAtomically(file, bytes) {
  const tmp = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, bytes);
  fs.renameSync(tmp, file);
}

class ShardWriter {
  constructor(outDir, shardTokens, log) {
    this.outDir = outDir;
    this.buffer = new Uint16Array(shardTokens);
    this.used = 0;
    this.shards = [];
    this.log = log;
  }
  push(tokens) {
    let i = 0;
    while (i < tokens.length) {
      const n = Math.min(tokens.length - i, this.buffer.length - this.used);
      this.buffer.set(tokens.subarray(i, i + n), this.used);
      this.used += n;
      i += n;
      if (this.used === this.buffer.length) this.flush();
    }
  }
  flush() {
    if (this.used === 0) return;
    const name = `train_${String(this.shards.length).padStart(6, '0')}.bin`;
    writeAtomically(path.join(this.outDir, name), shardBytes(this.buffer.subarray(0, this.used)));
    this.log(`  wrote ${name}: ${this.used} tokens`);
    this.shards.push({file: name, tokens: this.used});
    this.used = 0;
  }
}

// Growable token list for val.bin.
class TokenList {
  constructor() {
    this.data = new Uint16Array(1 << 16);
    this.length = 0;
  }
  push(tokens) {
    if (this.length + tokens.length > this.data.length) {
      let cap = this.data.length;
      while (cap < this.length + tokens.length) cap *= 2;
      const grown = new Uint16Array(cap);
      grown.set(this.data.subarray(0, this.length));
      this.data = grown;
    }
    this.data.set(tokens, this.length);
    this.length += tokens.length;
  }
  view() { return this.data.subarray(0, this.length); }
}

function removeOldOutputs(outDir) {
  for (const name of fs.readdirSync(outDir)) {
    if (/^train_\d{6}\.bin$/.test(name) || name === 'val.bin' || name === 'manifest.json' || name.includes('.tmp-')) {
      fs.rmSync(path.join(outDir, name));
    }
  }
}

async function tokenise(opts, log) {
  if (os.endianness() !== 'LE') throw new Error('this script writes little-endian shards and needs a little-endian host');
  let tokenizer;
  try {
    tokenizer = await import('gpt-tokenizer/encoding/gpt2');
  } catch (err) {
    throw new Error(`cannot load gpt-tokenizer (${err.message}); run: npm ci --prefix scripts`);
  }
  if (tokenizer.vocabularySize !== GPT2_VOCAB) {
    throw new Error(`expected the GPT-2 vocabulary of ${GPT2_VOCAB} tokens, the tokenizer has ${tokenizer.vocabularySize}`);
  }
  const files = listInputFiles(opts.inputs);
  fs.mkdirSync(opts.out, {recursive: true});
  removeOldOutputs(opts.out);

  const train = new ShardWriter(opts.out, opts.shardTokens, log);
  const val = new TokenList();
  const sources = [];
  const counts = {trainDocs: 0, valDocs: 0, skipped: []};
  // Documents can be ordinary text that happens to contain "<|endoftext|>": encode it as text.
  const encodeOptions = {disallowedSpecial: new Set()};
  let lastDoc = null;
  for (const file of files) {
    const bytes = fs.readFileSync(file);
    if (isBinary(bytes)) {
      counts.skipped.push(file);
      continue;
    }
    let docs = 0;
    for (const doc of documentsOf(new TextDecoder('utf-8').decode(bytes))) {
      const tokens = Uint16Array.from([EOT, ...tokenizer.encode(doc, encodeOptions)]);
      if (opts.valFraction > 0 && splitHash(doc, opts.seed) < opts.valFraction) {
        val.push(tokens);
        counts.valDocs++;
      } else {
        if (lastDoc !== null) train.push(lastDoc);
        lastDoc = tokens;  // held back: becomes val if val would otherwise be empty
        counts.trainDocs++;
      }
      docs++;
    }
    sources.push({file, documents: docs});
    log(`  ${file}: ${docs} documents`);
  }
  if (opts.valFraction > 0 && val.length === 0 && lastDoc !== null) {
    val.push(lastDoc);
    counts.valDocs++;
    counts.trainDocs--;
  } else if (lastDoc !== null) {
    train.push(lastDoc);
  }
  train.flush();
  if (train.shards.length === 0) throw new Error('no training text found in the inputs');
  if (val.length > MAX_SHARD_TOKENS) throw new Error(`val.bin would hold ${val.length} tokens, more than one shard can`);
  if (opts.valFraction > 0) {
    writeAtomically(path.join(opts.out, 'val.bin'), shardBytes(val.view()));
    log(`  wrote val.bin: ${val.length} tokens`);
  }

  const manifest = {
    format: 'llm.c token shards (int32 header[256] = {20240520, 1, count}, uint16 tokens)',
    tokenizer: 'GPT-2 BPE (gpt-tokenizer, encoding gpt2)',
    vocab: GPT2_VOCAB,
    document_separator: EOT,
    val_fraction: opts.valFraction,
    seed: opts.seed,
    documents: {train: counts.trainDocs, val: counts.valDocs},
    train: train.shards,
    val: opts.valFraction > 0 ? {file: 'val.bin', tokens: val.length} : null,
    tokens: {train: train.shards.reduce((a, s) => a + s.tokens, 0), val: val.length},
    sources,
    skipped_binary_files: counts.skipped,
  };
  writeAtomically(path.join(opts.out, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n');
  return manifest;
}

// ---------------------------------------------------------------- verification

function checkShard(file, expectedTokens) {
  const problems = [];
  let bytes;
  try {
    bytes = fs.readFileSync(file);
  } catch (err) {
    return [`${file}: cannot read (${err.code ?? err.message})`];
  }
  if (bytes.length < HEADER_BYTES) return [`${file}: expected at least ${HEADER_BYTES} bytes, found ${bytes.length}`];
  const magic = bytes.readInt32LE(0);
  const version = bytes.readInt32LE(4);
  const count = bytes.readInt32LE(8);
  if (magic !== MAGIC) problems.push(`${file}: byte 0: expected magic ${MAGIC}, found ${magic}`);
  if (version !== VERSION) problems.push(`${file}: byte 4: expected version ${VERSION}, found ${version}`);
  if (HEADER_BYTES + 2 * count !== bytes.length) {
    problems.push(`${file}: header says ${count} tokens = ${HEADER_BYTES + 2 * count} bytes, found ${bytes.length}`);
  }
  if (expectedTokens !== undefined && count !== expectedTokens) {
    problems.push(`${file}: manifest says ${expectedTokens} tokens, header says ${count}`);
  }
  if (problems.length) return problems;
  for (let i = 0; i < count; ++i) {
    const token = bytes.readUInt16LE(HEADER_BYTES + 2 * i);
    if (token >= GPT2_VOCAB) {
      problems.push(`${file}: byte ${HEADER_BYTES + 2 * i}: expected a token < ${GPT2_VOCAB}, found ${token}`);
      break;
    }
  }
  return problems;
}

function verify(outDir) {
  const manifestPath = path.join(outDir, 'manifest.json');
  let manifest;
  try {
    manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8'));
  } catch (err) {
    return {problems: [`${manifestPath}: missing or unreadable (${err.code ?? err.message}): the data is incomplete`]};
  }
  const problems = [];
  const shards = [...(manifest.train ?? [])];
  if (shards.length === 0) problems.push(`${manifestPath}: lists no train shards`);
  if (manifest.val) shards.push(manifest.val);
  let tokens = 0;
  for (const shard of shards) {
    problems.push(...checkShard(path.join(outDir, shard.file), shard.tokens));
    tokens += shard.tokens;
  }
  return {problems, tokens, files: shards.length};
}

// ---------------------------------------------------------------- main

async function main() {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    console.error(`prepare_data: ${err.message}\n${usage()}`);
    return 2;
  }
  if (opts.help) {
    console.log(usage());
    return 0;
  }
  const log = opts.quiet ? () => {} : (line) => console.log(line);
  if (opts.inputs.length > 0) {
    let manifest;
    try {
      manifest = await tokenise(opts, log);
    } catch (err) {
      console.error(`prepare_data: ${err.message}`);
      return err instanceof UsageError ? 2 : 1;
    }
    console.log(`prepare_data: ${opts.out}: ${manifest.documents.train} train documents, ` +
                `${manifest.tokens.train} tokens in ${manifest.train.length} shard(s); ` +
                `${manifest.documents.val} val documents, ${manifest.tokens.val} tokens` +
                (manifest.skipped_binary_files.length ? `; skipped ${manifest.skipped_binary_files.length} binary files` : ''));
  }
  if (opts.vocabCheck) {
    const {problems, tokens, files} = verify(opts.out);
    if (problems.length) {
      for (const p of problems) console.error(`prepare_data: ${p}`);
      return 1;
    }
    console.log(`prepare_data: vocab check ok: ${files} file(s), ${tokens} tokens, all < ${GPT2_VOCAB}`);
  }
  return 0;
}

process.exitCode = await main();
