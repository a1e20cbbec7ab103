//! [`Numerics`]: how a model rounds, as one value the model owns and passes down to
//! every op that has a choice (never a thread-local or a global read inside a kernel).

/// How a model's arithmetic rounds: which order its sums take and where it keeps f16.
///
/// The model owns it ([`crate::model::DecoderModel::numerics`]); its forward passes it
/// to each layer in the attention options, and the layers to the ops: attention (f16
/// steps and llama.cpp's summation orders), the gated activations (llama.cpp's f16 GELU
/// table, its SiLU), and the quantised products (their prompt orders).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Numerics {
    /// lucent's own f32 arithmetic: f32 throughout, sums in its kernels' own orders.
    /// (Quantised weights meet activations quantised as llama.cpp does, the only way
    /// their kernels work, and a prompt's products take llama.cpp's prompt orders.)
    #[default]
    Lucent,
    /// llama.cpp's CPU arithmetic (its AVX2 build), operation for operation: Q, K and V
    /// rounded to f16 as its KV cache keeps them, its f16 products and vector exp, its
    /// f16 GELU table and SiLU, and its summation orders, which differ between a prompt
    /// and a single token. A GGUF model's logits then equal llama.cpp's bit for bit;
    /// what the GGUF families run by default.
    LlamaCpp,
    /// [`Numerics::LlamaCpp`]'s f16 steps, with every row of a product (every query row
    /// of attention, every row of a quantised matrix product) computed as it would be
    /// alone, in a single token's order: a KV-cached decode equals the full forward bit
    /// for bit, and no row's result depends on the rows beside it (batch invariance).
    /// Differs from llama.cpp in the last bits of a prompt's rows.
    RowInvariant,
}

impl Numerics {
    /// Whether this follows llama.cpp's f16 steps and operations
    /// ([`Numerics::LlamaCpp`] or [`Numerics::RowInvariant`]).
    pub fn llama_cpp(self) -> bool {
        matches!(self, Numerics::LlamaCpp | Numerics::RowInvariant)
    }

    /// Whether every row is computed as a lone row ([`Numerics::RowInvariant`]).
    pub fn row_invariant(self) -> bool {
        self == Numerics::RowInvariant
    }
}
