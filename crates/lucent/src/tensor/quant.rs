//! Quantised storage of GGUF files (ggml's formats): the storage types ([`GgmlType`]),
//! their blocks as `#[repr(C, packed)]` structs whose sizes are checked at compile time
//! ([`BlockQ4_0`] … [`BlockIQ4_XS`]), the unpacking of the K-quants' 6-bit scales, and the
//! bytes a quantised matrix reads ([`QBytes`]).
//!
//! A quantised row of `n` numbers is `n / B` blocks of `B` numbers. Each block stores
//! small integers `q` and one or two f16 numbers; the value it stands for is
//!
//! - `Q4_0`, `Q5_0`, `Q8_0` (B = 32): `x = d · (q − o)` with o = 8, 16, 0,
//! - `Q4_1`, `Q5_1` (B = 32):          `x = d · q + m`,
//! - `Q4_K`, `Q5_K` (B = 256, eight sub-blocks of 32 with 6-bit scale `sc` and min `mn`):
//!   `x = d · sc_j · q − dmin · mn_j`,
//! - `Q6_K` (B = 256, sixteen groups of 16 with an i8 scale): `x = d · sc_g · (q − 32)`,
//! - `Q2_K` (B = 256, sixteen groups of 16 with 4-bit scale `sc` and min `mn`):
//!   `x = d · sc_g · q − dmin · mn_g` (q of 2 bits),
//! - `Q3_K` (B = 256, sixteen groups of 16 with a 6-bit scale): `x = d · (sc_g − 32) · (q − 4)`
//!   (q of 3 bits),
//! - `IQ4_NL` (B = 32): `x = d · K[q]`, and `IQ4_XS` (B = 256, eight sub-blocks of 32 with
//!   a 6-bit scale): `x = d · (sc_j − 32) · K[q]`, where K is ggml's non-linear grid of
//!   sixteen values ([`KVALUES_IQ4NL`]) and q of 4 bits picks one.
//!
//! The block structs are the one statement of each layout: every kernel reads a block
//! through its fields (or, for pointer-walking SIMD code, through `offset_of!` on them),
//! never through byte offsets of its own. They are packed (alignment 1), so a row of
//! blocks can be read in place from any byte of a memory-mapped file ([`blocks`]).
//! The arithmetic on them (dequantisation, dot products, the matrix products) is in
//! `crate::ops::quant`.

use std::fmt;
use std::sync::Arc;

use half::f16;

use crate::{Error, Result};

/// Numbers per block of the 32-blocks (`Q4_0` ... `Q8_0`).
pub const QK: usize = 32;
/// Numbers per block of the K-quants (`Q2_K` … `Q6_K`, `IQ4_XS`) and of `Q8_K` activations.
pub const QK_K: usize = 256;

/// A storage type of GGUF tensors that lucent reads. The discriminants are ggml's ids.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// IEEE f32.
    F32,
    /// IEEE f16.
    F16,
    /// bfloat16.
    BF16,
    /// 32-blocks: f16 `d`, 16 bytes of 4-bit `q`; `x = d (q − 8)`. 18 bytes.
    Q4_0,
    /// 32-blocks: f16 `d`, f16 `m`, 16 bytes of 4-bit `q`; `x = d q + m`. 20 bytes.
    Q4_1,
    /// 32-blocks: f16 `d`, 32 high bits, 16 bytes of low nibbles; `x = d (q − 16)`. 22 bytes.
    Q5_0,
    /// 32-blocks: f16 `d`, f16 `m`, 32 high bits, 16 bytes of low nibbles; `x = d q + m`. 24 bytes.
    Q5_1,
    /// 32-blocks: f16 `d`, 32 i8 `q`; `x = d q`. 34 bytes.
    Q8_0,
    /// 256-blocks: f16 `d`, f16 `dmin`, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles. 144 bytes.
    Q4_K,
    /// 256-blocks: as Q4_K plus 32 bytes of fifth bits. 176 bytes.
    Q5_K,
    /// 256-blocks: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 i8 scales, f16 `d`. 210 bytes.
    Q6_K,
    /// 256-blocks: 16 bytes of 4-bit scales and mins, 64 bytes of 2-bit `q`, f16 `d`, f16 `dmin`. 84 bytes.
    Q2_K,
    /// 256-blocks: 32 bytes of third bits, 64 bytes of low 2-bit pairs, 12 bytes of 6-bit scales, f16 `d`. 110 bytes.
    Q3_K,
    /// 32-blocks: f16 `d`, 16 bytes of 4-bit indices into the grid [`KVALUES_IQ4NL`]. 18 bytes.
    IQ4_NL,
    /// 256-blocks: f16 `d`, 2 + 4 bytes of 6-bit scales, 128 bytes of 4-bit grid indices. 136 bytes.
    IQ4_XS,
}

impl GgmlType {
    /// Every type lucent reads.
    pub const ALL: [GgmlType; 15] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ];

    /// The type with ggml id `id`, or `None` if lucent does not read it
    /// (see [`ggml_type_name`] for a name to put in the error).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// ggml's numeric id of this type (as stored in GGUF tensor tables).
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::Q2_K => 10,
            GgmlType::Q3_K => 11,
            GgmlType::IQ4_NL => 20,
            GgmlType::IQ4_XS => 23,
            GgmlType::BF16 => 30,
        }
    }

    /// ggml's name of the type (`"Q4_K"`).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4_K => "Q4_K",
            GgmlType::Q5_K => "Q5_K",
            GgmlType::Q6_K => "Q6_K",
            GgmlType::Q2_K => "Q2_K",
            GgmlType::Q3_K => "Q3_K",
            GgmlType::IQ4_NL => "IQ4_NL",
            GgmlType::IQ4_XS => "IQ4_XS",
        }
    }

    /// Numbers per block (1 for the float types).
    pub fn block_len(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::IQ4_NL => QK,
            GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::IQ4_XS => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => std::mem::size_of::<BlockQ4_0>(),
            GgmlType::Q4_1 => std::mem::size_of::<BlockQ4_1>(),
            GgmlType::Q5_0 => std::mem::size_of::<BlockQ5_0>(),
            GgmlType::Q5_1 => std::mem::size_of::<BlockQ5_1>(),
            GgmlType::Q8_0 => std::mem::size_of::<BlockQ8_0>(),
            GgmlType::Q4_K => std::mem::size_of::<BlockQ4_K>(),
            GgmlType::Q5_K => std::mem::size_of::<BlockQ5_K>(),
            GgmlType::Q6_K => std::mem::size_of::<BlockQ6_K>(),
            GgmlType::Q2_K => std::mem::size_of::<BlockQ2_K>(),
            GgmlType::Q3_K => std::mem::size_of::<BlockQ3_K>(),
            GgmlType::IQ4_NL => std::mem::size_of::<BlockIQ4_NL>(),
            GgmlType::IQ4_XS => std::mem::size_of::<BlockIQ4_XS>(),
        }
    }

    /// Bytes of a row of `n` numbers; errors if `n` is not a whole number of blocks.
    pub fn row_bytes(self, n: usize) -> Result<usize> {
        let b = self.block_len();
        if !n.is_multiple_of(b) {
            return Err(Error::Shape(format!(
                "a {} row holds whole blocks of {b} numbers, but this row has {n}; \
                 the tensor's innermost dimension must be a multiple of {b}",
                self.name()
            )));
        }
        (n / b).checked_mul(self.block_bytes()).ok_or_else(|| {
            Error::Shape(format!("a {} row of {n} numbers is too large", self.name()))
        })
    }

    /// How activations are quantised for a dot product with a row of this type.
    pub fn activation_kind(self) -> ActKind {
        match self {
            GgmlType::F32 => ActKind::F32,
            GgmlType::F16 => ActKind::F16,
            GgmlType::BF16 => ActKind::BF16,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::IQ4_NL => ActKind::Q8_0,
            GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::IQ4_XS => ActKind::Q8_K,
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// ggml's name for a type id, including types lucent does not read (for error messages).
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    if let Some(t) = GgmlType::from_id(id) {
        return Some(t.name());
    }
    Some(match id {
        9 => "Q8_1",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        21 => "IQ3_S",
        22 => "IQ2_S",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return None,
    })
}

// ------------------------------------------------------------------ block layouts

/// A `Q4_0` block: 32 numbers `x = d · (q − 8)`; `qs[j]` holds number j in its low
/// nibble and number j + 16 in its high nibble.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_0 {
    /// The scale.
    pub d: f16,
    /// The 4-bit numbers, two a byte.
    pub qs: [u8; 16],
}

/// A `Q4_1` block: 32 numbers `x = d · q + m`; nibbles as [`BlockQ4_0`]'s.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_1 {
    /// The scale.
    pub d: f16,
    /// The minimum.
    pub m: f16,
    /// The 4-bit numbers, two a byte.
    pub qs: [u8; 16],
}

/// A `Q5_0` block: 32 numbers `x = d · (q − 16)`, q's low four bits as [`BlockQ4_0`]'s
/// nibbles and its fifth bit, for number i, bit i of the little-endian `qh`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_0 {
    /// The scale.
    pub d: f16,
    /// The fifth bits, a little-endian u32.
    pub qh: [u8; 4],
    /// The low four bits, two numbers a byte.
    pub qs: [u8; 16],
}

/// A `Q5_1` block: 32 numbers `x = d · q + m`, q as [`BlockQ5_0`]'s.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_1 {
    /// The scale.
    pub d: f16,
    /// The minimum.
    pub m: f16,
    /// The fifth bits, a little-endian u32.
    pub qh: [u8; 4],
    /// The low four bits, two numbers a byte.
    pub qs: [u8; 16],
}

/// A `Q8_0` block: 32 numbers `x = d · q`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8_0 {
    /// The scale.
    pub d: f16,
    /// The 8-bit numbers.
    pub qs: [i8; 32],
}

/// A `Q4_K` block: 256 numbers in eight sub-blocks of 32, `x = d · sc_j · q − dmin · mn_j`
/// with sub-block j's 6-bit scale and minimum packed in `scales` ([`k_scale_min`]).
/// Sub-block j is the low nibbles (j even) or high nibbles (j odd) of
/// `qs[32 · (j / 2) .. 32 · (j / 2) + 32]`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_K {
    /// The scale of the sub-blocks' scales.
    pub d: f16,
    /// The scale of the sub-blocks' minimums.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit minimums.
    pub scales: [u8; 12],
    /// The 4-bit numbers, two a byte.
    pub qs: [u8; 128],
}

/// A `Q5_K` block: [`BlockQ4_K`]'s layout plus a fifth bit for each number: number
/// `32 j + l` has bit j of `qh[l]`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_K {
    /// The scale of the sub-blocks' scales.
    pub d: f16,
    /// The scale of the sub-blocks' minimums.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit minimums.
    pub scales: [u8; 12],
    /// The fifth bits.
    pub qh: [u8; 32],
    /// The low four bits, two numbers a byte.
    pub qs: [u8; 128],
}

/// A `Q6_K` block: 256 numbers `x = d · sc_g · (q − 32)` in sixteen groups of 16. Number
/// `i = 128 n + 32 k + l` (n half, k quarter, l < 32) takes its low four bits from
/// `ql[64 n + 32 (k % 2) + l]` (low nibble for k < 2, high for k ≥ 2), its high two
/// bits from bits 2k, 2k + 1 of `qh[32 n + l]`, and the scale `scales[i / 16]`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ6_K {
    /// The low four bits, two numbers a byte.
    pub ql: [u8; 128],
    /// The high two bits, four numbers a byte.
    pub qh: [u8; 64],
    /// The groups' scales.
    pub scales: [i8; 16],
    /// The scale of the scales.
    pub d: f16,
}

/// A `Q2_K` block: 256 numbers `x = d · sc_g · q − dmin · mn_g` in sixteen groups of
/// 16, q of 2 bits. Number `i = 128 n + 32 k + l` (n half, k quarter, l < 32) is bits
/// 2k, 2k + 1 of `qs[32 n + l]`; group g = i / 16 has scale `scales[g] & 15` and
/// minimum `scales[g] >> 4`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ2_K {
    /// The groups' 4-bit scales (low nibbles) and minimums (high nibbles).
    pub scales: [u8; 16],
    /// The 2-bit numbers, four a byte.
    pub qs: [u8; 64],
    /// The scale of the groups' scales.
    pub d: f16,
    /// The scale of the groups' minimums.
    pub dmin: f16,
}

/// A `Q3_K` block: 256 numbers `x = d · (sc_g − 32) · (q − 4)` in sixteen groups of 16,
/// q of 3 bits. Number `i = 128 n + 32 k + l` takes its low two bits from bits 2k,
/// 2k + 1 of `qs[32 n + l]` and its third bit from bit `4 n + k` of `hmask[l]`; group
/// g = i / 16 has the 6-bit scale `sc_g` packed in `scales` ([`q3_k_scales`]).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ3_K {
    /// The third bits.
    pub hmask: [u8; 32],
    /// The low two bits, four numbers a byte.
    pub qs: [u8; 64],
    /// Sixteen 6-bit scales.
    pub scales: [u8; 12],
    /// The scale of the scales.
    pub d: f16,
}

/// An `IQ4_NL` block: 32 numbers `x = d · K[q]` ([`KVALUES_IQ4NL`]); `qs[j]` holds the
/// index of number j in its low nibble and of number j + 16 in its high nibble.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ4_NL {
    /// The scale.
    pub d: f16,
    /// The 4-bit grid indices, two a byte.
    pub qs: [u8; 16],
}

/// An `IQ4_XS` block: 256 numbers `x = d · (sc_j − 32) · K[q]` ([`KVALUES_IQ4NL`]) in
/// eight sub-blocks of 32. Sub-block j's indices are laid out as an [`BlockIQ4_NL`]'s in
/// `qs[16 j .. 16 j + 16]`; its 6-bit scale has its low four bits in nibble `j % 2` of
/// `scales_l[j / 2]` and its top two in bits 2j, 2j + 1 of the little-endian `scales_h`
/// ([`BlockIQ4_XS::sub_scales`]).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIQ4_XS {
    /// The scale of the sub-blocks' scales.
    pub d: f16,
    /// The scales' top two bits, a little-endian u16.
    pub scales_h: [u8; 2],
    /// The scales' low four bits, two a byte.
    pub scales_l: [u8; 4],
    /// The 4-bit grid indices, two a byte.
    pub qs: [u8; 128],
}

/// ggml's non-linear 4-bit grid (`kvalues_iq4nl`): the values `IQ4_NL` and `IQ4_XS`
/// indices stand for.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The sixteen signed scales `sc_g − 32` of a Q3_K block, unpacked from its 12 scale
/// bytes s: group g keeps its low four bits in the low nibble of s[g] (g < 8) or the
/// high nibble of s[g − 8] (g ≥ 8), and its top two bits in bits 2 (g / 4),
/// 2 (g / 4) + 1 of s[8 + g % 4].
#[inline]
pub fn q3_k_scales(s: &[u8; 12]) -> [i8; 16] {
    // Sixteen 6-bit fields (low four bits: scale g's nibble of bytes 0..8, low nibbles
    // first; high two bits: bits 2 (g / 4) of byte 8 + g % 4) made with whole-word
    // operations, eight bytes a word, so that no per-scale loop (or closure the
    // compiler may leave out of line) runs: as a loop of sixteen steps it had cost a
    // Q3_K token's product half its speed. Each byte then has 32 taken away without a
    // borrow crossing bytes: (x | 0x80) − 32 stays in its byte for x < 64, and xor 0x80
    // gives x − 32 modulo 256.
    let word = |b: &[u8]| {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(w)
    };
    let (a, h) = (word(&s[..8]), word(&s[8..]));
    let two = 0x0303_0303u64;
    let h_lo = (h & two) | ((h >> 2) & two) << 32; // scales 0..8
    let h_hi = ((h >> 4) & two) | ((h >> 6) & two) << 32; // scales 8..16
    let nib = 0x0F0F_0F0F_0F0F_0F0Fu64;
    let (top, sub) = (0x8080_8080_8080_8080u64, 0x2020_2020_2020_2020u64);
    let minus32 = |v: u64| ((v | top) - sub) ^ top;
    let lo = minus32((a & nib) | (h_lo << 4)).to_le_bytes();
    let hi = minus32(((a >> 4) & nib) | (h_hi << 4)).to_le_bytes();
    let mut out = [0i8; 16];
    for g in 0..8 {
        out[g] = lo[g] as i8;
        out[8 + g] = hi[g] as i8;
    }
    out
}

impl BlockIQ4_XS {
    /// The eight signed scales `sc_j − 32` of the sub-blocks.
    #[inline]
    pub fn sub_scales(&self) -> [i8; 8] {
        let h = u16::from_le_bytes(self.scales_h);
        // A plain loop, not a closure the compiler may leave out of line.
        let mut out = [0i8; 8];
        for (j, o) in out.iter_mut().enumerate() {
            let low = (self.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F;
            let high = ((h >> (2 * j)) & 3) as u8;
            *o = ((low | (high << 4)) as i32 - 32) as i8;
        }
        out
    }
}

// The layouts are ggml's, byte for byte.
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(std::mem::size_of::<BlockQ4_K>() == 144);
const _: () = assert!(std::mem::size_of::<BlockQ5_K>() == 176);
const _: () = assert!(std::mem::size_of::<BlockQ6_K>() == 210);
const _: () = assert!(std::mem::size_of::<BlockQ2_K>() == 84);
const _: () = assert!(std::mem::size_of::<BlockQ3_K>() == 110);
const _: () = assert!(std::mem::size_of::<BlockIQ4_NL>() == 18);
const _: () = assert!(std::mem::size_of::<BlockIQ4_XS>() == 136);

/// A block type: its [`GgmlType`], for [`blocks`] and the sizes' checks.
pub trait Block: bytemuck::Pod {
    /// The storage type whose blocks these are.
    const TYPE: GgmlType;
}

impl Block for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
}
impl Block for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
}
impl Block for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
}
impl Block for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
}
impl Block for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
}
impl Block for BlockQ4_K {
    const TYPE: GgmlType = GgmlType::Q4_K;
}
impl Block for BlockQ5_K {
    const TYPE: GgmlType = GgmlType::Q5_K;
}
impl Block for BlockQ6_K {
    const TYPE: GgmlType = GgmlType::Q6_K;
}
impl Block for BlockQ2_K {
    const TYPE: GgmlType = GgmlType::Q2_K;
}
impl Block for BlockQ3_K {
    const TYPE: GgmlType = GgmlType::Q3_K;
}
impl Block for BlockIQ4_NL {
    const TYPE: GgmlType = GgmlType::IQ4_NL;
}
impl Block for BlockIQ4_XS {
    const TYPE: GgmlType = GgmlType::IQ4_XS;
}

/// The whole blocks of type `B` in `bytes` (a trailing part of a block is left out):
/// read in place, whatever the bytes' alignment.
pub fn blocks<B: Block>(bytes: &[u8]) -> &[B] {
    let whole = bytes.len() / std::mem::size_of::<B>() * std::mem::size_of::<B>();
    bytemuck::cast_slice(&bytes[..whole])
}

/// The f16 `h` as f32 (the value a block's scale or minimum stands for; f16 is stored
/// little-endian, as GGUF stores it).
#[inline(always)]
pub fn f16_value(h: f16) -> f32 {
    f16::from_bits(u16::from_le(h.to_bits())).to_f32()
}

impl BlockQ5_0 {
    /// The 32 fifth bits (bit i: number i).
    #[inline(always)]
    pub fn high_bits(&self) -> u32 {
        u32::from_le_bytes(self.qh)
    }
}

impl BlockQ5_1 {
    /// The 32 fifth bits (bit i: number i).
    #[inline(always)]
    pub fn high_bits(&self) -> u32 {
        u32::from_le_bytes(self.qh)
    }
}

// ------------------------------------------------------------------ K-quant scales

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block, unpacked from
/// its 12 scale bytes: sub-blocks 0–3 keep their low 6 bits in bytes j (scale) and j+4
/// (min); sub-blocks 4–7 keep their low 4 bits in byte j+4 (scale: low nibble, min: high
/// nibble) and their top 2 bits in the top 2 bits of bytes j−4 (scale) and j (min).
#[inline]
pub fn k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// All eight 6-bit scales and minimums of a Q4_K/Q5_K block at once ([`k_scale_min`]
/// for j = 0..8), with word-wide bit operations on its 12 scale bytes read as three
/// little-endian u32 (a, b, c): scales 0–3 are the low 6 bits of a's bytes, mins 0–3
/// those of b's; scales 4–7 take c's low nibbles with a's top 2 bits above them, mins
/// 4–7 c's high nibbles with b's top 2 bits.
#[inline]
pub fn k_scales_mins(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    let word = |o: usize| u32::from_le_bytes([s[o], s[o + 1], s[o + 2], s[o + 3]]);
    let (a, b, c) = (word(0), word(4), word(8));
    let sc_hi = (c & LOW4) | (((a >> 6) & LOW2) << 4);
    let mn_hi = ((c >> 4) & LOW4) | (((b >> 6) & LOW2) << 4);
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    sc[..4].copy_from_slice(&(a & LOW6).to_le_bytes());
    sc[4..].copy_from_slice(&sc_hi.to_le_bytes());
    mn[..4].copy_from_slice(&(b & LOW6).to_le_bytes());
    mn[4..].copy_from_slice(&mn_hi.to_le_bytes());
    (sc, mn)
}

// ------------------------------------------------------------------ activations

/// How an activation row is prepared for a dot product with a weight row.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActKind {
    /// Kept as f32 (F32 weights).
    F32,
    /// Rounded to f16, to nearest even (F16 weights: llama.cpp's `vec_dot_type`), held
    /// widened to f32.
    F16,
    /// Rounded to bfloat16, to nearest even, NaN made quiet (BF16 weights), held widened
    /// to f32.
    BF16,
    /// Blocks of 32: f32 scale `d`, 32 i8, and `d · Σ q` (for the `_1` types' min).
    Q8_0,
    /// Blocks of 256: f32 scale `d`, 256 i8, and the i32 sum of every 16 `q`.
    Q8_K,
}

// ------------------------------------------------------------------ matrix bytes

/// Bytes a quantised matrix (`ops::quant::QMatrix`) reads: a window of a memory-mapped file, or owned.
#[derive(Clone)]
pub enum QBytes {
    /// `len` bytes from `start` of a mapped file.
    Mapped {
        /// The mapped file.
        map: Arc<memmap2::Mmap>,
        /// First byte.
        start: usize,
        /// Byte count.
        len: usize,
    },
    /// Bytes in memory.
    Owned(Arc<Vec<u8>>),
}

impl QBytes {
    /// The bytes (empty if a mapped window lies outside its map).
    pub fn as_slice(&self) -> &[u8] {
        match self {
            // An out-of-range window reads as empty, which QMatrix::new then rejects.
            QBytes::Mapped { map, start, len } => start
                .checked_add(*len)
                .and_then(|end| map.get(*start..end))
                .unwrap_or(&[]),
            QBytes::Owned(v) => v,
        }
    }
}

#[cfg(test)]
mod q3_tests {
    use super::*;

    /// The word-wise Q3_K scales equal ggml's per-scale statement on every value each
    /// field can take and on random scale bytes.
    #[test]
    fn q3_k_scales_equal_the_per_scale_statement() {
        let plain = |s: &[u8; 12]| -> [i8; 16] {
            let mut out = [0i8; 16];
            for (g, o) in out.iter_mut().enumerate() {
                let low = if g < 8 { s[g] & 0x0F } else { s[g - 8] >> 4 };
                let high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
                *o = ((low | (high << 4)) as i32 - 32) as i8;
            }
            out
        };
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for n in 0..200_000u32 {
            let mut s = [0u8; 12];
            for b in s.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = (state >> 32) as u8;
            }
            if n < 256 {
                s = [n as u8; 12];
            }
            assert_eq!(q3_k_scales(&s), plain(&s), "{s:?}");
        }
    }
}
