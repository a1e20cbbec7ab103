"""llama.cpp as the decoder tests' reference: check a build against the golden files, or
dump its intermediates for one golden prompt. Run through scripts/parity-llama-avx2.sh.

    llama_parity.py DATA MODELS check
    llama_parity.py DATA MODELS dump MODEL PROMPT OUTDIR
"""

import ctypes
import glob
import json
import sys

import numpy as np
import llama_cpp as L


def golden(data, name):
    with open(f"{data}/decoder_reference_{name}.json") as f:
        return json.load(f)["cases"]


def model_path(models, name):
    return glob.glob(f"{models}/{name}/*.gguf")[0]


def check(data, models):
    """Largest |logit − golden| over each prompt's top 10, first step."""
    for name in ("smollm2", "gemma3"):
        llm = L.Llama(model_path=model_path(models, name), n_ctx=512, n_batch=512,
                      n_threads=1, logits_all=True, verbose=False)
        for case in golden(data, name):
            llm.reset()
            llm.eval(case["prompt_ids"])
            logits = np.array(llm.scores[llm.n_tokens - 1])
            worst = max(abs(float(logits[i]) - g)
                        for i, g in zip(case["top10_ids"], case["top10_logits"]))
            print(f"{name:8s} {len(case['prompt_ids']):3d} tokens  "
                  f"max |difference| {worst:.6f}  {case['prompt']!r}")


class Tensor(ctypes.Structure):
    """ggml's `struct ggml_tensor` (ggml.h: 4 dims, 64 bytes of op params, 10 sources,
    64-byte names)."""
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4),
                ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10),
                ("view_src", ctypes.c_void_p), ("view_offs", ctypes.c_size_t),
                ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]


def dump(data, models, name, prompt, outdir):
    """Every f32/f16 tensor of one prompt's evaluation, as NAME.npy (repeated names get
    #1, #2, ...), with their shapes in index.json."""
    ids = golden(data, name)[prompt]["prompt_ids"]
    index = {}

    def on_tensor(t, ask, _user):
        if ask:
            return True
        tt = ctypes.cast(t, ctypes.POINTER(Tensor)).contents
        if tt.type not in (0, 1) or not tt.data:  # F32, F16
            return True
        ne, nb = list(tt.ne), list(tt.nb)
        dtype, item = (np.float32, 4) if tt.type == 0 else (np.float16, 2)
        span = sum((n - 1) * s for n, s in zip(ne, nb)) + item
        raw = np.frombuffer((ctypes.c_char * span).from_address(tt.data), dtype=dtype)
        a = np.lib.stride_tricks.as_strided(raw, shape=ne[::-1], strides=nb[::-1])
        key = base = tt.name.decode().replace("/", "_")
        n = 1
        while key in index:
            key, n = f"{base}#{n}", n + 1
        np.save(f"{outdir}/{key}.npy", a.astype(np.float32))
        index[key] = ne
        return True

    callback = L.ggml_backend_sched_eval_callback(on_tensor)
    L.llama_backend_init()
    model = L.llama_model_load_from_file(model_path(models, name).encode(),
                                         L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_threads, cp.n_threads_batch = 512, 512, 1, 1
    cp.cb_eval, cp.cb_eval_user_data = callback, None
    ctx = L.llama_init_from_model(model, cp)
    tokens = (L.llama_token * len(ids))(*ids)
    if L.llama_decode(ctx, L.llama_batch_get_one(tokens, len(ids))) != 0:
        sys.exit("llama_decode failed")
    with open(f"{outdir}/index.json", "w") as f:
        json.dump(index, f)
    print(f"{len(index)} tensors of {name} prompt {prompt} ({len(ids)} tokens) in {outdir}")


if __name__ == "__main__":
    data, models, what = sys.argv[1], sys.argv[2], sys.argv[3]
    if what == "check":
        check(data, models)
    elif what == "dump" and len(sys.argv) == 7:
        dump(data, models, sys.argv[4], int(sys.argv[5]), sys.argv[6])
    else:
        sys.exit(__doc__)
