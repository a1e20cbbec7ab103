"""Vocabulary-only GGUF files, one per pre-tokenizer (`tokenizer.ggml.pre`) lucent reads,
and llama.cpp's token ids for a hostile text: the test bench of
`crates/lucent/tests/gguf_tokenizers.rs`.

    PYTHON scripts/make_gguf_tokenizers.py [OUTDIR]

OUTDIR defaults to tests/data/gguf_tokenizers. PYTHON needs `gguf`, `numpy` and
llama-cpp-python 0.3.36 (tokenisation is integer work: any build of it gives the same
ids, so the bench venv's AVX-512 build serves). Run once; its outputs are committed.

The text is OUTDIR/hostile.txt: many scripts (Latin with diacritics, Greek, Cyrillic,
Arabic, Hebrew, Devanagari, Bengali, Tamil, Thai, CJK, kana, Hangul), emoji (skin tones,
ZWJ families, flags, keycaps), digits of many kinds and number runs, whitespace runs (tabs,
CRLF, NBSP, ideographic and other Unicode spaces, U+2028/2029/0085, vertical tab, form
feed), zero-width and combining characters, code, HTML, JSON, paths and contractions in
every case.

Every file shares one byte-level BPE vocabulary: the 256 bytes as GPT-2 writes them,
then MERGES merges learned from the hostile text itself *without* any pre-tokenisation
(so many merges cross the boundaries a pre-tokenizer draws: which of them can apply is
exactly what tells pre-tokenizers apart), then a few whole words with no merge that
makes them (" World", "Hello", "123", ...: reachable only by a pre-tokenizer with
llama.cpp's `ignore_merges`), then one control token. Only `tokenizer.ggml.pre` differs
between the files.

reference.json holds, per pre-tokenizer name, llama.cpp's ids (`Llama.tokenize(text,
add_bos=False, special=False)`) of the whole text and of each of its lines (ends kept).
"""

import collections
import json
import os
import sys

import gguf

import llama_cpp

from make_gguf_families import byte_chars  # GPT-2's byte → character table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MERGES = 900

# One name per distinct regex list of llama.cpp's `llm_tokenizer_bpe` (0.3.36), plus the
# aliases real files carry most.
PRE = [
    "default", "gpt-2", "olmo", "llama-bpe", "dbrx", "qwen2", "qwen35", "smollm",
    "starcoder", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "bloom",
    "chatglm-bpe", "glm4", "viking", "tekken", "chameleon", "gpt-4o", "llama4",
    "seed-coder", "bailingmoe", "ufakzeka", "laguna", "exaone-moe", "minicpm5", "jais-2",
    "spark2_5", "youtu", "command-r", "stablelm2", "grok-2",
]

WHOLE_WORDS = [" World", "Hello", " Transformer", "123", "!!!", " the", " Мир", "世界", " 😀"]


def learn_merges(text, n):
    """n BPE merges over the byte-encoded text with no pre-tokenisation: the most frequent
    adjacent pair each round (ties: the smallest pair), merged left to right."""
    chars = byte_chars()
    seq = [chars[b] for b in text.encode("utf-8")]
    merges = []
    for _ in range(n):
        counts = collections.Counter(zip(seq, seq[1:]))
        if not counts:
            break
        (a, b), count = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if count < 2:
            break
        merges.append((a, b))
        out, i = [], 0
        while i < len(seq):
            if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(seq[i])
                i += 1
        seq = out
    return merges


def vocabulary(text):
    chars = byte_chars()
    tokens = list(chars)
    seen = set(tokens)
    merges = []
    for a, b in learn_merges(text, MERGES):
        merges.append(f"{a} {b}")
        if a + b not in seen:
            tokens.append(a + b)
            seen.add(a + b)
    for w in WHOLE_WORDS:
        enc = "".join(chars[x] for x in w.encode("utf-8"))
        if enc not in seen:
            tokens.append(enc)
            seen.add(enc)
    tokens.append("<|endoftext|>")
    types = [1] * (len(tokens) - 1) + [3]
    return tokens, types, merges


def write(path, pre, tokens, types, merges):
    w = gguf.GGUFWriter(path, "llama")
    w.add_uint32("llama.context_length", 256)
    w.add_uint32("llama.embedding_length", 64)
    w.add_uint32("llama.block_count", 1)
    w.add_uint32("llama.feed_forward_length", 64)
    w.add_uint32("llama.attention.head_count", 2)
    w.add_uint32("llama.attention.head_count_kv", 2)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.bos_token_id", len(tokens) - 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", len(tokens) - 1)
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "gguf_tokenizers")
    with open(os.path.join(out, "hostile.txt"), encoding="utf-8", newline="") as f:
        text = f.read()
    tokens, types, merges = vocabulary(text)
    lines = text.splitlines(keepends=True)
    reference = {
        "llama_cpp_python": llama_cpp.__version__,
        "merges": len(merges),
        "vocab": len(tokens),
        "lines": len(lines),
        "pre": {},
    }
    for pre in PRE:
        path = os.path.join(out, f"{pre}.gguf")
        write(path, pre, tokens, types, merges)
        llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        per_line = [llm.tokenize(line.encode("utf-8"), add_bos=False, special=False) for line in lines]
        reference["pre"][pre] = {"text": ids, "lines": per_line}
        print(f"{pre:16} {len(ids):5} ids", file=sys.stderr)
        del llm
    # Tell the pre-tokenizers apart: how many distinct id sequences the names give.
    distinct = {json.dumps(v["text"]) for v in reference["pre"].values()}
    reference["distinct_sequences"] = len(distinct)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, separators=(",", ":"))
    print(f"{len(PRE)} files, {len(distinct)} distinct id sequences", file=sys.stderr)


if __name__ == "__main__":
    main()
