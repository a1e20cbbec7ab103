//! Handing out a module's parameters by name, for optimisers and checkpoints.
//!
//! [`Parameters::visit_params`] calls a function with the dotted name and a mutable
//! reference of every parameter tensor of a module, in a fixed order. The names follow
//! the fields: `layers.0.self_attn.q_proj.weight`, `ffn.w1.bias`, ... Everything else
//! (marking parameters, clearing gradients, counting, saving) is built on it.

use crate::model::{DecoderModel, EncoderDecoderModel};
use crate::nn::position::LearnedPositions;
use crate::nn::{
    Decoder, DecoderLayer, Embedding, Encoder, EncoderLayer, FeedForward, Head, LayerNorm, Linear,
    MultiHeadAttention, Norm, RmsNorm, Transformer,
};
use crate::tensor::Tensor;

/// The visitor's callback: (dotted name, parameter).
pub type ParamsMut<'a> = dyn FnMut(&str, &mut Tensor) + 'a;

/// `prefix.name`, or `name` when the prefix is empty.
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// A module with trainable tensors.
pub trait Parameters {
    /// Call `f` with the name (under `prefix`) and tensor of every parameter, in a fixed
    /// order.
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut);

    /// Mark every parameter as wanting a gradient (fresh leaves, no gradient yet).
    fn requires_grad(&mut self) {
        self.visit_params("", &mut |_, t| *t = t.detach().requires_grad());
    }

    /// Drop the autograd leaves: the module is for inference only again.
    fn detach_params(&mut self) {
        self.visit_params("", &mut |_, t| *t = t.detach());
    }

    /// Clear the gradient of every parameter.
    fn zero_grad(&mut self) {
        self.visit_params("", &mut |_, t| t.zero_grad());
    }

    /// (name, tensor) of every parameter (cheap clones sharing storage).
    fn named_parameters(&mut self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.visit_params("", &mut |n, t| out.push((n.to_string(), t.clone())));
        out
    }

    /// The number of trainable numbers.
    fn num_parameters(&mut self) -> usize {
        let mut n = 0;
        self.visit_params("", &mut |_, t| n += t.numel());
        n
    }
}

impl Parameters for Linear {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        // W handed out to change: the copies kept of it would go stale.
        self.forget_copies();
        // Quantised (GGUF) weights are frozen: only f32 weights are trainable parameters.
        if let Some(w) = self.weight.as_f32_mut() {
            f(&join(prefix, "weight"), w);
        }
        if let Some(b) = &mut self.bias {
            f(&join(prefix, "bias"), b);
        }
    }
}

impl Parameters for LayerNorm {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        f(&join(prefix, "weight"), &mut self.weight);
        if let Some(b) = &mut self.bias {
            f(&join(prefix, "bias"), b);
        }
    }
}

impl Parameters for RmsNorm {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        f(&join(prefix, "weight"), &mut self.weight);
    }
}

impl Parameters for Norm {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        match self {
            Norm::Layer(n) => n.visit_params(prefix, f),
            Norm::Rms(n) => n.visit_params(prefix, f),
        }
    }
}

impl Parameters for Embedding {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        if let Some(t) = self.table.as_f32_mut() {
            f(&join(prefix, "weight"), t);
        }
    }
}

impl Parameters for LearnedPositions {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        f(&join(prefix, "weight"), self.table_mut());
    }
}

impl Parameters for crate::nn::position::AbsolutePositions {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        if let crate::nn::position::AbsolutePositions::Learned(l) = self {
            l.visit_params(prefix, f);
        }
    }
}

impl Parameters for MultiHeadAttention {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        self.q_proj.visit_params(&join(prefix, "q_proj"), f);
        self.k_proj.visit_params(&join(prefix, "k_proj"), f);
        self.v_proj.visit_params(&join(prefix, "v_proj"), f);
        self.o_proj.visit_params(&join(prefix, "o_proj"), f);
        if let Some(n) = &mut self.q_norm {
            n.visit_params(&join(prefix, "q_norm"), f);
        }
        if let Some(n) = &mut self.k_norm {
            n.visit_params(&join(prefix, "k_norm"), f);
        }
    }
}

impl Parameters for FeedForward {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        match self {
            FeedForward::Mlp { w1, w2, .. } => {
                w1.visit_params(&join(prefix, "w1"), f);
                w2.visit_params(&join(prefix, "w2"), f);
            }
            FeedForward::Gated { gate, up, down, .. } => {
                gate.visit_params(&join(prefix, "gate"), f);
                up.visit_params(&join(prefix, "up"), f);
                down.visit_params(&join(prefix, "down"), f);
            }
            FeedForward::Experts(m) => {
                m.router.visit_params(&join(prefix, "router"), f);
                for (e, ffn) in m.experts.iter_mut().enumerate() {
                    ffn.visit_params(&join(prefix, &format!("experts.{e}")), f);
                }
            }
        }
    }
}

fn visit_opt(n: &mut Option<Norm>, prefix: &str, name: &str, f: &mut ParamsMut) {
    if let Some(n) = n {
        n.visit_params(&join(prefix, name), f);
    }
}

impl Parameters for EncoderLayer {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        self.self_attn.visit_params(&join(prefix, "self_attn"), f);
        self.self_attn_norm
            .visit_params(&join(prefix, "self_attn_norm"), f);
        visit_opt(
            &mut self.self_attn_post_norm,
            prefix,
            "self_attn_post_norm",
            f,
        );
        self.ffn.visit_params(&join(prefix, "ffn"), f);
        self.ffn_norm.visit_params(&join(prefix, "ffn_norm"), f);
        visit_opt(&mut self.ffn_post_norm, prefix, "ffn_post_norm", f);
    }
}

impl Parameters for DecoderLayer {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        self.self_attn.visit_params(&join(prefix, "self_attn"), f);
        self.self_attn_norm
            .visit_params(&join(prefix, "self_attn_norm"), f);
        visit_opt(
            &mut self.self_attn_post_norm,
            prefix,
            "self_attn_post_norm",
            f,
        );
        if let Some(c) = &mut self.cross_attn {
            c.visit_params(&join(prefix, "cross_attn"), f);
        }
        visit_opt(&mut self.cross_attn_norm, prefix, "cross_attn_norm", f);
        visit_opt(
            &mut self.cross_attn_post_norm,
            prefix,
            "cross_attn_post_norm",
            f,
        );
        self.ffn.visit_params(&join(prefix, "ffn"), f);
        self.ffn_norm.visit_params(&join(prefix, "ffn_norm"), f);
        visit_opt(&mut self.ffn_post_norm, prefix, "ffn_post_norm", f);
    }
}

impl Parameters for Encoder {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        for (i, l) in self.layers.iter_mut().enumerate() {
            l.visit_params(&join(prefix, &format!("layers.{i}")), f);
        }
        visit_opt(&mut self.final_norm, prefix, "final_norm", f);
    }
}

impl Parameters for Decoder {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        for (i, l) in self.layers.iter_mut().enumerate() {
            l.visit_params(&join(prefix, &format!("layers.{i}")), f);
        }
        visit_opt(&mut self.final_norm, prefix, "final_norm", f);
    }
}

impl Parameters for Transformer {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        self.encoder.visit_params(&join(prefix, "encoder"), f);
        self.decoder.visit_params(&join(prefix, "decoder"), f);
    }
}

impl Parameters for Head {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        self.proj.visit_params(prefix, f);
    }
}

impl Parameters for DecoderModel {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        self.embedding.visit_params(&join(prefix, "embed"), f);
        if let Some(p) = &mut self.positions {
            p.visit_params(&join(prefix, "positions"), f);
        }
        self.decoder.visit_params(&join(prefix, "decoder"), f);
        if let Some(h) = &mut self.head {
            h.visit_params(&join(prefix, "head"), f);
        }
    }
}

impl Parameters for EncoderDecoderModel {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        self.embedding.visit_params(&join(prefix, "embed"), f);
        if let Some(e) = &mut self.src_embedding {
            e.visit_params(&join(prefix, "src_embed"), f);
        }
        if let Some(p) = &mut self.positions {
            p.visit_params(&join(prefix, "positions"), f);
        }
        if let Some(p) = &mut self.src_positions {
            p.visit_params(&join(prefix, "src_positions"), f);
        }
        self.transformer.visit_params(prefix, f);
        if let Some(h) = &mut self.head {
            h.visit_params(&join(prefix, "head"), f);
        }
    }
}
