//! `Conv1d` and `ConvStem`: one-dimensional convolution over time, and the convolutional
//! front-end that turns audio features into the encoder's input (Whisper, Radford et al.
//! 2022, §2.2: "a small stem consisting of two convolution layers with a filter width of
//! 3 and the GELU activation function where the second convolution layer has a stride of
//! two").
//!
//! y[t, o] = b[o] + Σ_c Σ_j W[o, c, j] · x[t·stride + j − padding, c]
//!
//! (x is zero outside its length). lucent keeps sequences time-major, (b, t, channels),
//! so the convolution is computed as one matrix product: each output step's window of
//! `kernel` input rows is laid out in a row ("im2col"), and W, permuted once at load to
//! (out, kernel · in), multiplies them all. [`Conv1d::forward_reference`] is the formula
//! as a loop, its plain twin.

use crate::ops::{self, Activation};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A 1-D convolution with zero padding, channels last.
#[derive(Clone, Debug)]
pub struct Conv1d {
    /// W as stored by PyTorch: (out, in, kernel).
    weight: Tensor,
    /// W permuted to (out, kernel · in): row o holds W[o, :, 0], W[o, :, 1], …
    weight_kc: Tensor,
    /// b: (out).
    bias: Option<Tensor>,
    /// Step between output positions.
    pub stride: usize,
    /// Zeros added at both ends.
    pub padding: usize,
}

impl Conv1d {
    /// From PyTorch's weight (out, in, kernel) and bias (out).
    pub fn new(
        weight: Tensor,
        bias: Option<Tensor>,
        stride: usize,
        padding: usize,
    ) -> Result<Self> {
        let [c_out, c_in, k] = weight.dims().map_err(|_| {
            Error::Weights(format!(
                "conv1d weight must be (out, in, kernel), got {:?}",
                weight.shape()
            ))
        })?;
        if c_out == 0 || c_in == 0 || k == 0 || stride == 0 {
            return Err(Error::Weights(format!(
                "conv1d needs a non-empty weight and stride ≥ 1 (weight {:?}, stride {stride})",
                weight.shape()
            )));
        }
        if let Some(b) = &bias {
            if b.shape() != [c_out] {
                return Err(Error::mismatch(
                    "conv1d bias vs weight (out)",
                    b.shape(),
                    &[c_out],
                ));
            }
        }
        let weight_kc = weight
            .permute(&[0, 2, 1])? // (out, kernel, in)
            .reshape(&[c_out, k * c_in])?; // (out, kernel·in)
        Ok(Conv1d {
            weight,
            weight_kc,
            bias,
            stride,
            padding,
        })
    }

    /// (out, in, kernel).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// Input channels.
    pub fn in_channels(&self) -> usize {
        self.weight.shape()[1]
    }

    /// Output channels.
    pub fn out_channels(&self) -> usize {
        self.weight.shape()[0]
    }

    /// Kernel width.
    pub fn kernel(&self) -> usize {
        self.weight.shape()[2]
    }

    /// Output length for an input of `t` steps: ⌊(t + 2·padding − kernel) / stride⌋ + 1.
    pub fn out_len(&self, t: usize) -> Result<usize> {
        let span = t + 2 * self.padding;
        if span < self.kernel() {
            return Err(Error::Argument(format!(
                "conv1d: {t} input steps are fewer than the kernel ({}) with padding {}",
                self.kernel(),
                self.padding
            )));
        }
        Ok((span - self.kernel()) / self.stride + 1)
    }

    fn check(&self, x: &Tensor) -> Result<[usize; 3]> {
        match x.dims::<3>() {
            Ok([b, t, c]) if c == self.in_channels() => Ok([b, t, c]),
            _ => Err(Error::mismatch(
                format!("conv1d: x must be (b, t, in = {})", self.in_channels()),
                x.shape(),
                &[self.in_channels()],
            )),
        }
    }

    /// The convolution, as one matrix product over the input's windows.
    ///
    /// # Shapes
    /// x: (b, t, in) → (b, t_out, out)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let [b, t, c_in] = self.check(x)?;
        let k = self.kernel();
        let t_out = self.out_len(t)?;
        let row = k * c_in;
        let xd = x.data();
        let mut cols = vec![0f32; b * t_out * row]; // (b·t_out, kernel·in)
        for bi in 0..b {
            for o in 0..t_out {
                let dst = &mut cols[(bi * t_out + o) * row..(bi * t_out + o + 1) * row];
                for j in 0..k {
                    let src = (o * self.stride + j).checked_sub(self.padding);
                    if let Some(s) = src.filter(|&s| s < t) {
                        let from = (bi * t + s) * c_in;
                        dst[j * c_in..(j + 1) * c_in].copy_from_slice(&xd[from..from + c_in]);
                    }
                }
            }
        }
        let cols = Tensor::new(cols, &[b, t_out, row])?; // (b, t_out, kernel·in)
        ops::linear(&cols, &self.weight_kc, self.bias.as_ref()) // (b, t_out, out)
    }

    /// The formula as a loop (the plain twin of [`Conv1d::forward`]).
    ///
    /// # Shapes
    /// x: (b, t, in) → (b, t_out, out)
    pub fn forward_reference(&self, x: &Tensor) -> Result<Tensor> {
        let [b, t, c_in] = self.check(x)?;
        let (k, c_out) = (self.kernel(), self.out_channels());
        let t_out = self.out_len(t)?;
        let (w, xd) = (self.weight.data(), x.data());
        let mut y = vec![0f32; b * t_out * c_out];
        for bi in 0..b {
            for o in 0..t_out {
                for co in 0..c_out {
                    let mut acc = self.bias.as_ref().map_or(0.0, |b| b.data()[co]);
                    for ci in 0..c_in {
                        for j in 0..k {
                            let s = (o * self.stride + j) as isize - self.padding as isize;
                            if s >= 0 && (s as usize) < t {
                                acc += w[(co * c_in + ci) * k + j]
                                    * xd[(bi * t + s as usize) * c_in + ci];
                            }
                        }
                    }
                    y[(bi * t_out + o) * c_out + co] = acc;
                }
            }
        }
        Tensor::new(y, &[b, t_out, c_out])
    }
}

/// Whisper's convolutional stem: conv (stride 1) → GELU → conv (stride 2) → GELU, both
/// with kernel 3 and padding 1, so that 3000 frames of features become 1500 positions.
#[derive(Clone, Debug)]
pub struct ConvStem {
    /// features → d (stride 1).
    pub conv1: Conv1d,
    /// d → d (stride 2).
    pub conv2: Conv1d,
    /// The nonlinearity after each (GELU with erf).
    pub activation: Activation,
}

impl ConvStem {
    /// From its two convolutions; checks that they chain.
    pub fn new(conv1: Conv1d, conv2: Conv1d, activation: Activation) -> Result<Self> {
        if conv1.out_channels() != conv2.in_channels() {
            return Err(Error::Weights(format!(
                "conv stem: conv1 gives {} channels but conv2 reads {}",
                conv1.out_channels(),
                conv2.in_channels()
            )));
        }
        Ok(ConvStem {
            conv1,
            conv2,
            activation,
        })
    }

    /// Feature channels it reads (n_mels).
    pub fn in_channels(&self) -> usize {
        self.conv1.in_channels()
    }

    /// Width it gives (d).
    pub fn out_channels(&self) -> usize {
        self.conv2.out_channels()
    }

    /// Features in PyTorch's layout (channels first) → the encoder's input.
    ///
    /// # Shapes
    /// features: (b, n_mels, frames) → (b, ⌈frames / 2⌉, d)
    pub fn forward(&self, features: &Tensor) -> Result<Tensor> {
        let [_, c, _] = features.dims().map_err(|_| {
            Error::Argument(format!(
                "audio features must be (b, n_mels, frames), got {:?}",
                features.shape()
            ))
        })?;
        if c != self.in_channels() {
            return Err(Error::Argument(format!(
                "audio features have {c} mel bins, the model reads {} (n_mels)",
                self.in_channels()
            )));
        }
        let x = features.transpose(1, 2)?; // (b, frames, n_mels)
        let mut h = self.conv1.forward(&x)?; // (b, frames, d)
        ops::activation::apply_in_place(self.activation, h.data_mut());
        let mut h = self.conv2.forward(&h)?; // (b, frames / 2, d)
        ops::activation::apply_in_place(self.activation, h.data_mut());
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn im2col_equals_the_loop() -> Result<()> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for (c_in, c_out, k, stride, pad, t) in [
            (3, 5, 3, 1, 1, 7),
            (4, 2, 3, 2, 1, 9),
            (1, 1, 1, 1, 0, 1),
            (5, 3, 3, 2, 1, 2),
        ] {
            let w = Tensor::randn(&[c_out, c_in, k], 1.0, &mut rng);
            let bias = Tensor::randn(&[c_out], 1.0, &mut rng);
            let conv = Conv1d::new(w, Some(bias), stride, pad)?;
            let x = Tensor::randn(&[2, t, c_in], 1.0, &mut rng);
            let fast = conv.forward(&x)?;
            let slow = conv.forward_reference(&x)?;
            assert_eq!(fast.shape(), slow.shape());
            assert!(
                fast.max_abs_diff(&slow)? < 1e-5,
                "{c_in} {c_out} {k} {stride}"
            );
        }
        Ok(())
    }

    #[test]
    fn shapes_are_checked() {
        let conv = Conv1d::new(Tensor::zeros(&[2, 3, 3]), None, 2, 1).unwrap();
        assert_eq!(conv.out_len(3000).unwrap(), 1500);
        assert!(conv.forward(&Tensor::zeros(&[1, 4, 2])).is_err());
        assert!(Conv1d::new(Tensor::zeros(&[2, 3]), None, 1, 1).is_err());
        assert!(Conv1d::new(Tensor::zeros(&[2, 3, 3]), Some(Tensor::zeros(&[3])), 1, 1).is_err());
    }
}
