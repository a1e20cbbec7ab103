//! The shape of the tensor after every step of a forward pass, for any [`ModelConfig`].
//!
//! The guides' letters: b batch, t sequence length (t_src / t_tgt in an
//! encoder-decoder), d = d_model, h query heads, h_kv key/value heads, d_k features per
//! head, d_ff the feed-forward width, V the vocabulary. One layer of a stack is listed
//! once with `repeat` = N, since every layer has the same shapes:
//!
//! ```text
//! ids (b, t) → embedding (b, t, d) → Q (b, t, h·d_k), K, V (b, t, h_kv·d_k)
//!   → split heads (b, h, t, d_k) → scores Q·Kᵀ/√d_k (b, h, t, t) → softmax (b, h, t, t)
//!   → context (b, h, t, d_k) → merge heads (b, t, h·d_k) → W_O (b, t, d)
//!   → residual (+ norm) (b, t, d) → FFN (b, t, d_ff) → (b, t, d) → ... → logits (b, t, V)
//! ```
//!
//! Cross-attention scores in the decoder of an encoder-decoder are (b, h, t_tgt, t_src).

use serde::Serialize;

use crate::model::config::{FfnKind, ModelConfig, ModelKind, NormPlacement, PositionKind};
use crate::{Error, Result};

/// One step of the forward pass and the shape of its result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShapeStep {
    /// Where it happens: "input", "encoder", "decoder" or "output".
    pub stage: String,
    /// How many times the step runs one after the other (N inside a stack, else 1).
    pub repeat: usize,
    /// What the step does, in the guides' words.
    pub name: String,
    /// The shape in letters, e.g. "(b, h, t, d_k)".
    pub dims: String,
    /// The shape in numbers.
    pub shape: Vec<usize>,
    /// What else is worth knowing (mask, window, grouping); may be empty.
    pub note: String,
}

/// Every step of a forward pass of `cfg` over `batch` sequences of `seq` tokens.
/// For an encoder-decoder, `seq` is the target length and `src_seq` (default `seq`)
/// the source length.
///
/// # Shapes
/// Inputs are token ids (b, t); a decoder ends with logits (b, t, V), an encoder with
/// hidden states (b, t, d) (and the pooled (b, d) when it has a pooler).
pub fn forward_shapes(
    cfg: &ModelConfig,
    batch: usize,
    seq: usize,
    src_seq: Option<usize>,
) -> Result<Vec<ShapeStep>> {
    cfg.validate()?;
    if batch == 0 {
        return Err(Error::Argument("batch must be > 0, got 0".into()));
    }
    if seq == 0 {
        return Err(Error::Argument(
            "seq (the sequence length T) must be > 0, got 0".into(),
        ));
    }
    if src_seq == Some(0) {
        return Err(Error::Argument("src_seq must be > 0, got 0".into()));
    }
    if src_seq.is_some() && cfg.kind != ModelKind::EncoderDecoder {
        return Err(Error::Argument(format!(
            "src_seq is for an encoder-decoder; the {} config has one stack, use seq",
            cfg.family
        )));
    }
    let mut out = Vec::new();
    match cfg.kind {
        ModelKind::Encoder => {
            let mut s = Steps::new(cfg, batch, "t", seq);
            s.embed("input", "t");
            s.layer("encoder", cfg.encoder_layers, None, false);
            s.end_of_stack("encoder");
            out.extend(s.steps);
            if cfg.pooler {
                out.push(step(
                    "output",
                    1,
                    "pooler: tanh(W_p · h_[CLS] + b_p)",
                    "(b, d)",
                    &[batch, cfg.d_model],
                ));
            }
        }
        ModelKind::Decoder => {
            let mut s = Steps::new(cfg, batch, "t", seq);
            s.embed("input", "t");
            s.layer("decoder", cfg.decoder_layers, None, true);
            s.end_of_stack("decoder");
            s.logits();
            out.extend(s.steps);
        }
        ModelKind::EncoderDecoder => {
            let src = src_seq.unwrap_or(seq);
            let mut e = Steps::new(cfg, batch, "t_src", src);
            e.embed("encoder", "t_src");
            e.layer("encoder", cfg.encoder_layers, None, false);
            e.end_of_stack("encoder");
            out.extend(e.steps);
            let mut d = Steps::new(cfg, batch, "t_tgt", seq);
            d.embed("decoder", "t_tgt");
            d.layer("decoder", cfg.decoder_layers, Some(src), true);
            d.end_of_stack("decoder");
            d.logits();
            out.extend(d.steps);
        }
    }
    Ok(out)
}

fn step(stage: &str, repeat: usize, name: &str, dims: &str, shape: &[usize]) -> ShapeStep {
    ShapeStep {
        stage: stage.into(),
        repeat,
        name: name.into(),
        dims: dims.into(),
        shape: shape.to_vec(),
        note: String::new(),
    }
}

/// Builds the steps of one stack over one sequence length.
struct Steps<'a> {
    cfg: &'a ModelConfig,
    b: usize,
    /// The letter of this stack's length ("t", "t_src", "t_tgt").
    tl: &'static str,
    t: usize,
    steps: Vec<ShapeStep>,
}

impl<'a> Steps<'a> {
    fn new(cfg: &'a ModelConfig, b: usize, tl: &'static str, t: usize) -> Self {
        Steps {
            cfg,
            b,
            tl,
            t,
            steps: Vec::new(),
        }
    }

    /// Add a step whose dims are written with `{t}` standing for this stack's length.
    fn push(&mut self, stage: &str, repeat: usize, name: &str, dims: &str, shape: &[usize]) {
        let dims = dims.replace("{t}", self.tl);
        let name = name.replace("{t}", self.tl);
        self.steps.push(step(stage, repeat, &name, &dims, shape));
    }

    /// Attach a note to the last step.
    fn note(&mut self, note: &str) {
        if let Some(last) = self.steps.last_mut() {
            last.note = note.to_string();
        }
    }

    fn btd(&self) -> [usize; 3] {
        [self.b, self.t, self.cfg.d_model]
    }

    fn embed(&mut self, stage: &str, ids: &str) {
        let c = self.cfg;
        let (b, t, d) = (self.b, self.t, c.d_model);
        self.push(stage, 1, &format!("token ids ({ids})"), "(b, {t})", &[b, t]);
        let scale = if (c.embedding_scale - 1.0).abs() > f32::EPSILON {
            format!(" × {:.4} (√d)", c.embedding_scale)
        } else {
            String::new()
        };
        self.push(
            stage,
            1,
            &format!("token embedding{scale}"),
            "(b, {t}, d)",
            &[b, t, d],
        );
        match c.position {
            PositionKind::Learned => self.push(
                stage,
                1,
                "+ learned positions (({t}, d) table, broadcast over b)",
                "(b, {t}, d)",
                &[b, t, d],
            ),
            PositionKind::Sinusoidal => self.push(
                stage,
                1,
                "+ sinusoidal positions (({t}, d) table, broadcast over b)",
                "(b, {t}, d)",
                &[b, t, d],
            ),
            _ => {}
        }
        if c.type_vocab_size > 0 {
            self.push(
                stage,
                1,
                "+ token-type embedding",
                "(b, {t}, d)",
                &[b, t, d],
            );
        }
        if c.embedding_norm {
            self.push(stage, 1, "embedding norm", "(b, {t}, d)", &[b, t, d]);
        }
    }

    /// One layer's steps; `cross` is the encoder's length when the layer has
    /// cross-attention, `causal` marks decoder self-attention.
    fn layer(&mut self, stage: &str, n: usize, cross: Option<usize>, causal: bool) {
        let c = self.cfg;
        let (b, t, d) = (self.b, self.t, c.d_model);
        let btd = self.btd();
        let pre = matches!(
            c.norm_placement,
            NormPlacement::Pre | NormPlacement::Sandwich
        );
        if pre {
            self.push(stage, n, "norm before attention", "(b, {t}, d)", &btd);
        }
        let mask = match (causal, c.sliding_window) {
            (true, Some(w)) => format!("causal; window {w} on local layers"),
            (true, None) => "causal".to_string(),
            (false, Some(w)) => format!("window {w} on local layers"),
            (false, None) => "no mask".to_string(),
        };
        self.attention(stage, n, false, t, &mask);
        self.residual(stage, n, "attention");
        if let Some(src) = cross {
            if pre {
                self.push(stage, n, "norm before cross-attention", "(b, {t}, d)", &btd);
            }
            self.attention(stage, n, true, src, "keys from the encoder");
            self.residual(stage, n, "cross-attention");
        }
        if pre {
            self.push(stage, n, "norm before FFN", "(b, {t}, d)", &btd);
        }
        let f = c.d_ff;
        match c.ffn {
            FfnKind::Mlp => {
                self.push(stage, n, "FFN: W₁ x + b₁", "(b, {t}, d_ff)", &[b, t, f]);
                self.push(
                    stage,
                    n,
                    &format!("FFN: {}", c.activation.name()),
                    "(b, {t}, d_ff)",
                    &[b, t, f],
                );
                self.push(stage, n, "FFN: W₂ · + b₂", "(b, {t}, d)", &[b, t, d]);
            }
            FfnKind::Gated => {
                self.push(stage, n, "FFN: gate W_gate x", "(b, {t}, d_ff)", &[b, t, f]);
                self.push(stage, n, "FFN: up W_up x", "(b, {t}, d_ff)", &[b, t, f]);
                let act = format!("FFN: {}(gate) ⊙ up", c.activation.name());
                self.push(stage, n, &act, "(b, {t}, d_ff)", &[b, t, f]);
                self.push(stage, n, "FFN: down W_down", "(b, {t}, d)", &[b, t, d]);
            }
        }
        self.residual(stage, n, "FFN");
    }

    /// The attention sub-layer: queries from this stack's length t, keys and values
    /// from `tk` positions (the encoder's output when `cross`).
    fn attention(&mut self, stage: &str, n: usize, cross: bool, tk: usize, mask: &str) {
        let what = if cross {
            "cross-attention"
        } else {
            "self-attention"
        };
        let c = self.cfg;
        let (b, t) = (self.b, self.t);
        let (h, hkv, dk, d) = (c.n_heads, c.n_kv_heads, c.head_dim, c.d_model);
        // Keys and values come from this stack (self-attention) or the encoder output.
        let kl = if cross { "t_src" } else { self.tl };
        let hk = if hkv == h { "h" } else { "h_kv" };
        let src = if cross { "memory" } else { "x" };
        self.push(
            stage,
            n,
            &format!("{what}: Q = x W_Q"),
            "(b, {t}, h·d_k)",
            &[b, t, h * dk],
        );
        let kv_flat = format!("(b, {kl}, {hk}·d_k)");
        self.push(
            stage,
            n,
            &format!("{what}: K = {src} W_K"),
            &kv_flat,
            &[b, tk, hkv * dk],
        );
        self.push(
            stage,
            n,
            &format!("{what}: V = {src} W_V"),
            &kv_flat,
            &[b, tk, hkv * dk],
        );
        self.push(
            stage,
            n,
            &format!("{what}: split heads Q"),
            "(b, h, {t}, d_k)",
            &[b, h, t, dk],
        );
        let kv_split = format!("(b, {hk}, {kl}, d_k)");
        self.push(
            stage,
            n,
            &format!("{what}: split heads K, V"),
            &kv_split,
            &[b, hkv, tk, dk],
        );
        if c.qk_norm {
            self.push(
                stage,
                n,
                &format!("{what}: QK-norm on Q (and K)"),
                "(b, h, {t}, d_k)",
                &[b, h, t, dk],
            );
        }
        if matches!(c.position, PositionKind::Rope { .. }) && !cross {
            self.push(
                stage,
                n,
                &format!("{what}: RoPE on Q (and K)"),
                "(b, h, {t}, d_k)",
                &[b, h, t, dk],
            );
        }
        let group = if hkv == h {
            String::new()
        } else {
            format!("; 1 K/V head per {} query heads", h / hkv)
        };
        let scores = format!("(b, h, {{t}}, {kl})");
        self.push(
            stage,
            n,
            &format!("{what}: scores Q·Kᵀ/√d_k"),
            &scores,
            &[b, h, t, tk],
        );
        self.note(&format!("{mask}{group}"));
        self.push(
            stage,
            n,
            &format!("{what}: weights = softmax(scores)"),
            &scores,
            &[b, h, t, tk],
        );
        self.push(
            stage,
            n,
            &format!("{what}: context = weights · V"),
            "(b, h, {t}, d_k)",
            &[b, h, t, dk],
        );
        self.push(
            stage,
            n,
            &format!("{what}: merge heads"),
            "(b, {t}, h·d_k)",
            &[b, t, h * dk],
        );
        self.push(
            stage,
            n,
            &format!("{what}: output projection W_O"),
            "(b, {t}, d)",
            &[b, t, d],
        );
    }

    fn residual(&mut self, stage: &str, n: usize, what: &str) {
        let btd = self.btd();
        let name = match self.cfg.norm_placement {
            NormPlacement::Pre => format!("residual: x + {what}"),
            NormPlacement::Post => format!("residual + norm: norm(x + {what})"),
            NormPlacement::Sandwich => format!("residual: x + norm({what})"),
            NormPlacement::OnOutput => format!("residual: x + norm({what}) (no norm before)"),
        };
        self.push(stage, n, &name, "(b, {t}, d)", &btd);
    }

    fn end_of_stack(&mut self, stage: &str) {
        if self.cfg.final_norm {
            let btd = self.btd();
            self.push(stage, 1, "final norm", "(b, {t}, d)", &btd);
        }
    }

    fn logits(&mut self) {
        let c = self.cfg;
        let head = if c.tie_embeddings {
            "logits = h · Eᵀ (tied head)"
        } else {
            "logits = h · W_head"
        };
        let (b, t) = (self.b, self.t);
        self.push("output", 1, head, "(b, {t}, V)", &[b, t, c.vocab_size]);
    }
}
