#!/usr/bin/env bash
# Training throughput, lucent vs PyTorch (CPU), same model, batch and threads, one run.
#
# The model is the issue's reference GPT: 4 layers, d 128, 4 heads, d_ff 512, block 64,
# batch 12, vocabulary 80, learned positions, pre-LayerNorm, tanh-GELU, tied head,
# AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on matrices), clipping at 1.0.
# One step = forward + cross-entropy + backward + clip + AdamW, on random windows.
#
# PyTorch lives in a virtual environment outside the repository
# ($LUCENT_BENCH_VENV, default ~/.cache/lucent/bench-venv), installed from PyPI with
# `pip install torch numpy` on first use (numpy only silences torch's warning that it is
# missing). PyPI's Linux wheel carries CUDA libraries (a few GB) and runs on the CPU here;
# set TORCH_INDEX_URL to use another index, e.g. the CPU-only wheels at
# https://download.pytorch.org/whl/cpu, where that index is reachable.
#
# Usage: scripts/bench-train-peer.sh [STEPS]      (default 20 timed steps per thread count)
# SETUP_ONLY=1 installs PyTorch and builds lucent, then stops before measuring.
set -euo pipefail

STEPS="${1:-20}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv}"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    echo "installing PyTorch into $VENV (once) ..." >&2
    python3 -m venv "$VENV"
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
        "$VENV/bin/pip" install -q torch numpy --index-url "$TORCH_INDEX_URL"
    else
        "$VENV/bin/pip" install -q torch numpy
    fi
fi

cargo build --release -q -p lucent-cli --manifest-path "$ROOT/Cargo.toml"
LUCENT="$ROOT/target/release/lucent"
if [ -n "${SETUP_ONLY:-}" ]; then
    "$VENV/bin/python" -c "import torch; print('set-up done: PyTorch', torch.__version__, 'in $VENV;', '$LUCENT built')" >&2
    exit 0
fi

PEER=$(mktemp /tmp/lucent-peer-XXXXXX.py)
trap 'rm -f "$PEER"' EXIT
cat > "$PEER" <<'PY'
import json, math, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

steps, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
V, T, D, H, L, B = 80, 64, 128, 4, 4, 12

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.c_fc, self.mlp_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, H, d // H).transpose(1, 2) for z in (q, k, v))  # (b, h, t, dk)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.h:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.T

model = GPT()
decay = [p for p in model.parameters() if p.dim() >= 2]
other = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                        lr=1e-3, betas=(0.9, 0.99))
params = sum(p.numel() for p in model.parameters())

def step():
    data = torch.randint(0, V, (B, T + 1))
    logits = model(data[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, V), data[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()

for _ in range(3):
    step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
secs = time.perf_counter() - t0
print(json.dumps({"engine": "pytorch", "version": torch.__version__, "threads": threads,
                  "tok_s": steps * B * T / secs, "parameters": params}))
PY

echo "config: 4 layers, d 128, 4 heads, block 64, batch 12, vocab 80; $STEPS timed steps"
printf "%-8s %12s %12s %8s\n" threads "lucent tok/s" "torch tok/s" ratio
for t in 1 2; do
    L=$("$LUCENT" bench train --threads-list "$t" --steps "$STEPS" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["tok_s"])')
    P=$("$VENV/bin/python" "$PEER" "$STEPS" "$t" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tok_s"])')
    python3 -c "print(f'{$t:<8} {$L:>12.0f} {$P:>12.0f} {$L/$P:>8.2f}')"
done
