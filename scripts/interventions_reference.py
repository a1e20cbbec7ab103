"""Reference logits of lucent's interventions, computed by PyTorch forward hooks.

The committed character-level run (tests/data/runs/tiny-char: a 2-layer GPT, d_model 32,
4 heads, a 43-symbol vocabulary, trained by `lucent train lm`) is exported with
`lucent export hf`, loaded with `transformers.GPT2LMHeadModel.from_pretrained`, and run
over a prompt under each intervention of CASES, done the way TransformerLens users do it
on a PyTorch model: `register_forward_pre_hook` / `register_forward_hook` on the
submodule whose input or output is the hook point.

| lucent hook point | where PyTorch has it |
| --- | --- |
| `blocks.L.attn.hook_z` (head H) | the input of `h[L].attn.c_proj`, columns H·d_k .. (H+1)·d_k |
| `blocks.L.mlp.hook_post` (unit U) | the input of `h[L].mlp.c_proj`, column U |
| `blocks.L.hook_resid_pre` | the input of `h[L]` (L = 0: wte + wpe) |
| `blocks.L.hook_resid_post` | the output of `h[L]` |

Each case is written with its interventions as lucent's JSON values (the same objects
`lucent::Intervention::parse_json` reads), and every position's logits (f32) of the
hooked run, to tests/data/interventions_reference.json, with the sha256 of the exported
files. crates/lucent/tests/interventions_torch.rs runs the same JSON through
`lucent::Model::intervene` on the run and on the exported folder and holds the logits to
these within 1e-5.

Run once, outside the repository's environment (torch is not a dependency of lucent):

    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch transformers
    cargo build --release -p lucent-cli
    /tmp/refvenv/bin/python scripts/interventions_reference.py target/release/lucent
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import tokenizers
import torch
import transformers

REPO = Path(__file__).resolve().parents[1]
RUN = "tiny-char"
# Two prompts of as many tokens (characters) for patching: B's values are written into
# A's run.
PROMPT = "the old man and the sea"
SOURCE = "the big cat and the dog"
SEED = 20261127


def f32(x: np.float32) -> float:
    """x written with the fewest digits that give the same f32 back (a small file)."""
    return float(str(np.float32(x)))


def steering_vector(d: int) -> list[float]:
    """A seeded random vector of d numbers (norm about 4: the residual stream's scale)."""
    g = torch.Generator().manual_seed(SEED)
    return [f32(x) for x in (torch.randn(d, generator=g) * 0.7).numpy()]


def cases(d: int) -> list[tuple[str, list[dict]]]:
    """(name, lucent interventions) of every case; the first is the plain run."""
    v = steering_vector(d)
    return [
        ("plain", []),
        ("zero_head_1_2", [{"hook": "blocks.1.attn.hook_z", "op": "zero", "head": 2}]),
        ("zero_head_0_0", [{"hook": "blocks.0.attn.hook_z", "op": "zero", "head": 0}]),
        ("mean_head_0_1", [{"hook": "blocks.0.attn.hook_z", "op": "mean", "head": 1}]),
        ("mean_head_1_3", [{"hook": "blocks.1.attn.hook_z", "op": "mean", "head": 3}]),
        (
            "patch_resid_pre_1_positions",
            [{"hook": "blocks.1.hook_resid_pre", "op": "patch", "from": SOURCE, "positions": [4, 5, 6]}],
        ),
        (
            "patch_resid_pre_0_position",
            [{"hook": "blocks.0.hook_resid_pre", "op": "patch", "from": SOURCE, "positions": [8]}],
        ),
        ("patch_resid_pre_1_all", [{"hook": "blocks.1.hook_resid_pre", "op": "patch", "from": SOURCE}]),
        ("steer_resid_post_0_all", [{"hook": "blocks.0.hook_resid_post", "op": "add", "value": v}]),
        (
            "steer_resid_post_0_positions",
            [{"hook": "blocks.0.hook_resid_post", "op": "add", "value": v, "positions": [2, 9, 15]}],
        ),
        ("steer_resid_post_1_all", [{"hook": "blocks.1.hook_resid_post", "op": "add", "value": v}]),
        ("scale_head_1_0", [{"hook": "blocks.1.attn.hook_z", "op": "scale", "head": 0, "value": 2.5}]),
        ("zero_ffn_unit_0_17", [{"hook": "blocks.0.mlp.hook_post", "op": "zero", "unit": 17}]),
        ("zero_ffn_unit_1_40", [{"hook": "blocks.1.mlp.hook_post", "op": "zero", "unit": 40}]),
        (
            "composed",
            [
                {"hook": "blocks.0.attn.hook_z", "op": "zero", "head": 3},
                {"hook": "blocks.0.hook_resid_post", "op": "add", "value": v, "positions": [5]},
                {"hook": "blocks.1.mlp.hook_post", "op": "zero", "unit": 7},
                {"hook": "blocks.1.hook_resid_pre", "op": "patch", "from": SOURCE, "positions": [11]},
            ],
        ),
    ]


def positions_mask(t: int, positions: list[int] | None) -> torch.Tensor:
    """(1, t, 1) booleans: the selected positions (all when None)."""
    m = torch.zeros(1, t, 1, dtype=torch.bool)
    if positions is None:
        m[:] = True
    else:
        m[0, positions, 0] = True
    return m


def edit(x: torch.Tensor, iv: dict, cols: slice, source: torch.Tensor | None) -> torch.Tensor:
    """x (1, t, width) with iv written at columns `cols` of its selected positions."""
    t = x.shape[1]
    sel = positions_mask(t, iv.get("positions"))
    part = x[:, :, cols]  # (1, t, w)
    op = iv["op"]
    if op == "zero":
        new = torch.zeros_like(part)
    elif op == "mean":
        new = part.mean(dim=1, keepdim=True).expand_as(part)
    elif op == "add":
        new = part + torch.tensor(iv["value"], dtype=x.dtype)
    elif op == "scale":
        new = part * float(iv["value"])
    elif op == "patch":
        new = source[:, :, cols]
    else:
        raise ValueError(f"op {op} is not in this script")
    x = x.clone()
    x[:, :, cols] = torch.where(sel, new, part)
    return x


def run_hooked(model, ids: list[int], ivs: list[dict], sources: dict[str, torch.Tensor]) -> torch.Tensor:
    """The logits (t, V) of `ids` with every intervention of `ivs` done by a hook."""
    cfg = model.config
    dk = cfg.n_embd // cfg.n_head
    handles = []
    for iv in ivs:
        parts = iv["hook"].split(".")  # blocks.L.<...>
        layer = int(parts[1])
        point = ".".join(parts[2:])
        block = model.transformer.h[layer]
        if point == "attn.hook_z":
            h = iv["head"]
            cols = slice(h * dk, (h + 1) * dk)

            def pre(mod, args, iv=iv, cols=cols):
                return (edit(args[0], iv, cols, None),) + tuple(args[1:])

            handles.append(block.attn.c_proj.register_forward_pre_hook(pre))
        elif point == "mlp.hook_post":
            u = iv["unit"]
            cols = slice(u, u + 1)

            def pre(mod, args, iv=iv, cols=cols):
                return (edit(args[0], iv, cols, None),) + tuple(args[1:])

            handles.append(block.mlp.c_proj.register_forward_pre_hook(pre))
        elif point == "hook_resid_pre":
            src = sources.get(f"{iv['hook']}|{iv.get('from')}")

            def pre(mod, args, kwargs, iv=iv, src=src):
                if args:
                    return (edit(args[0], iv, slice(None), src),) + tuple(args[1:]), kwargs
                kwargs = dict(kwargs)
                kwargs["hidden_states"] = edit(kwargs["hidden_states"], iv, slice(None), src)
                return args, kwargs

            handles.append(block.register_forward_pre_hook(pre, with_kwargs=True))
        elif point == "hook_resid_post":

            def post(mod, args, out, iv=iv):
                if isinstance(out, tuple):
                    return (edit(out[0], iv, slice(None), None),) + tuple(out[1:])
                return edit(out, iv, slice(None), None)

            handles.append(block.register_forward_hook(post))
        else:
            raise ValueError(f"hook {iv['hook']} is not in this script")
    try:
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0]  # (t, V)
    finally:
        for handle in handles:
            handle.remove()


def record_resid_pre(model, ids: list[int], layer: int) -> torch.Tensor:
    """The input of block `layer` (blocks.L.hook_resid_pre) over `ids`: (1, t, d)."""
    got = {}

    def pre(mod, args, kwargs):
        got["x"] = (args[0] if args else kwargs["hidden_states"]).clone()

    handle = model.transformer.h[layer].register_forward_pre_hook(pre, with_kwargs=True)
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        handle.remove()
    return got["x"]


@torch.no_grad()
def logit_attribution(model, ids: list[int], target: int) -> dict:
    """Direct logit attribution of `target` at the last position, TransformerLens's
    `logit_attrs` with the cached final-norm scale, from forward hooks (in f64 from the
    f32 values the hooks see): s = 1 / std of the final residual (eps included), u = γ ⊙
    W_U[target], a part c of the residual adds s · u · (c − mean(c)). Terms: the
    embeddings (the input of h[0]), each head (its slice of the input of attn.c_proj
    times its rows of c_proj's weight), each FFN (the output of mlp), per layer the
    attention output minus its heads' sum, and the rest of the final residual."""
    got: dict[str, torch.Tensor] = {}
    handles = []

    def keep(name):
        def pre(mod, args):
            got[name] = args[0][0, -1].double()

        return pre

    def keep_out(name):
        def post(mod, args, out):
            out = out[0] if isinstance(out, tuple) else out
            got[name] = out[0, -1].double()

        return post

    blocks = model.transformer.h
    handles.append(blocks[0].register_forward_pre_hook(keep("x0")))
    for l, block in enumerate(blocks):
        handles.append(block.attn.c_proj.register_forward_pre_hook(keep(f"z{l}")))
        handles.append(block.attn.register_forward_hook(keep_out(f"attn{l}")))
        handles.append(block.mlp.register_forward_hook(keep_out(f"mlp{l}")))
    handles.append(blocks[-1].register_forward_hook(keep_out("final")))
    try:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1]
    finally:
        for handle in handles:
            handle.remove()
    cfg = model.config
    d, h = cfg.n_embd, cfg.n_head
    dk = d // h
    x = got["final"]
    s = 1.0 / torch.sqrt(((x - x.mean()) ** 2).mean() + cfg.layer_norm_epsilon)
    u = model.transformer.ln_f.weight.double() * model.lm_head.weight[target].double()

    def project(c: torch.Tensor) -> float:
        return float(s * ((c - c.mean()) * u).sum())

    heads, mlp, attn_rest = [], [], []
    summed = got["x0"].clone()
    for l, block in enumerate(blocks):
        w = block.attn.c_proj.weight.double()  # Conv1D: (in h·d_k, out d)
        z = got[f"z{l}"]
        row = [project(z[i * dk : (i + 1) * dk] @ w[i * dk : (i + 1) * dk]) for i in range(h)]
        heads.append(row)
        attn_rest.append(project(got[f"attn{l}"]) - sum(row))
        mlp.append(project(got[f"mlp{l}"]))
        summed += got[f"attn{l}"] + got[f"mlp{l}"]
    beta = float((model.transformer.ln_f.bias.double() * model.lm_head.weight[target].double()).sum())
    return {
        "target_id": target,
        "logit": float(logits[target]),
        "logit_f32": project(x),
        "final_norm_bias_term": beta,
        "scale": float(s),
        "embed": project(got["x0"]),
        "heads": heads,
        "mlp": mlp,
        "attn_rest": attn_rest,
        "rest": project(x - summed),
    }


def main() -> None:
    lucent = sys.argv[1] if len(sys.argv) > 1 else str(REPO / "target" / "release" / "lucent")
    torch.manual_seed(0)
    out = {
        "made_by": "scripts/interventions_reference.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "run": RUN,
        "prompt": PROMPT,
        "source": SOURCE,
        "seed": SEED,
        "cases": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = REPO / "tests" / "data" / "runs" / RUN
        folder = Path(tmp) / RUN
        subprocess.run([lucent, "export", "hf", str(run_dir), str(folder)], check=True)
        out["files"] = {
            f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())
        }
        tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        ids = tok.encode(PROMPT, add_special_tokens=False).ids
        src_ids = tok.encode(SOURCE, add_special_tokens=False).ids
        assert len(ids) == len(src_ids), "patching needs prompts of as many tokens"
        model = transformers.GPT2LMHeadModel.from_pretrained(
            folder, torch_dtype=torch.float32, attn_implementation="eager"
        )
        model.eval()
        out["ids"] = ids
        out["source_ids"] = src_ids
        d = model.config.n_embd
        plain = None
        for name, ivs in cases(d):
            sources = {}
            for iv in ivs:
                if iv["op"] == "patch":
                    layer = int(iv["hook"].split(".")[1])
                    sources[f"{iv['hook']}|{iv['from']}"] = record_resid_pre(model, src_ids, layer)
            logits = run_hooked(model, ids, ivs, sources)
            if plain is None:
                plain = logits
            moved = float((logits - plain).abs().max())
            assert name == "plain" or moved > 1e-2, f"{name} changes the logits by only {moved}"
            out["cases"].append(
                {
                    "name": name,
                    "interventions": ivs,
                    "max_change": moved,
                    "logits": [[f32(x) for x in row] for row in logits.numpy()],
                }
            )
            print(f"{name}: logits {tuple(logits.shape)}, max |Δ| from the plain run {moved:.4f}")
        # Patching every position from the source equals the source's own run.
        full = out["cases"][[c["name"] for c in out["cases"]].index("patch_resid_pre_1_all")]
        with torch.no_grad():
            src_logits = model(torch.tensor([src_ids])).logits[0]
        gap = float((torch.tensor(full["logits"]) - src_logits).abs().max())
        print(f"patching every position of blocks.1.hook_resid_pre vs the source's run: {gap}")
        # Direct logit attribution of the plain run's greedy next token.
        target = int(torch.tensor(out["cases"][0]["logits"][-1]).argmax())
        out["attribution"] = logit_attribution(model, ids, target)
        a = out["attribution"]
        print(
            f"attribution of id {target}: logit {a['logit']:.5f} = terms' logit {a['logit_f32']:.5f}"
            f" + the final norm's bias term {a['final_norm_bias_term']:.5f}"
        )
    path = REPO / "tests" / "data" / "interventions_reference.json"
    path.write_text(json.dumps(out) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
