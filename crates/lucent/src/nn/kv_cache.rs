//! `KvCache`: the keys and values of past positions, kept for incremental decoding.
//!
//! A causal decoder's keys and values for positions 0..t never change once computed, so
//! generating token t+1 needs only the new token's query, key and value: its K and V
//! are appended here and its query attends over the whole cache. Each layer's store is
//! preallocated as (b, h_kv, max_t, d_k) for K and (b, h_kv, max_t, d_v) for V; the first
//! `len` positions are filled. Cached decoding step by step equals the full causal
//! forward (tests hold it to 1e-5).

use crate::tensor::Tensor;
use crate::{Error, Result};

/// One layer's cached keys and values.
#[derive(Clone, Debug)]
pub struct LayerKvCache {
    /// K: (b, h_kv, max_t, d_k), first `len` positions valid
    k: Tensor,
    /// V: (b, h_kv, max_t, d_v), first `len` positions valid
    v: Tensor,
    len: usize,
    /// Cross-attention's keys and values of the memory (an encoder-decoder's source),
    /// each (b, h_kv, s, d_k): computed at the first step, read by every later one.
    memory_kv: Option<(Tensor, Tensor)>,
}

impl LayerKvCache {
    /// An empty cache for `b` sequences, `h_kv` heads, up to `max_t` positions.
    pub fn new(b: usize, h_kv: usize, max_t: usize, d_k: usize, d_v: usize) -> Self {
        LayerKvCache {
            k: Tensor::zeros(&[b, h_kv, max_t, d_k]),
            v: Tensor::zeros(&[b, h_kv, max_t, d_v]),
            len: 0,
            memory_kv: None,
        }
    }

    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is filled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most positions this cache can hold.
    pub fn capacity(&self) -> usize {
        self.k.shape()[2]
    }

    /// Forget positions from `len` on (e.g. to rewind a generation); emptied
    /// (`len` = 0), it forgets the memory's keys and values too.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        if self.len == 0 {
            self.memory_kv = None;
        }
    }

    /// Cross-attention's keys and values of the memory, once computed.
    ///
    /// # Shapes
    /// → k (b, h_kv, s, d_k), v (b, h_kv, s, d_k)
    pub fn memory_kv(&self) -> Option<&(Tensor, Tensor)> {
        self.memory_kv.as_ref()
    }

    /// Keep cross-attention's keys and values of the memory for the next steps (they
    /// stay until the cache is emptied).
    pub fn set_memory_kv(&mut self, k: Tensor, v: Tensor) {
        self.memory_kv = Some((k, v));
    }

    /// Append new keys and values for the next positions.
    ///
    /// # Shapes
    /// k: (b, h_kv, t_new, d_k), v: (b, h_kv, t_new, d_v)
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<()> {
        let [b, h, max_t, d_k] = self.k.dims()?;
        let d_v = self.v.shape()[3];
        let [kb, kh, t_new, kd] = k.dims()?;
        if [kb, kh, kd] != [b, h, d_k] {
            return Err(Error::mismatch(
                "KvCache append (new keys vs cache)",
                k.shape(),
                self.k.shape(),
            ));
        }
        if v.shape() != [b, h, t_new, d_v] {
            return Err(Error::mismatch(
                "KvCache append (new values vs cache)",
                v.shape(),
                self.v.shape(),
            ));
        }
        if self.len + t_new > max_t {
            return Err(Error::Argument(format!(
                "KvCache is full: {} positions cached + {t_new} new > capacity {max_t}; make the cache longer (max_t)",
                self.len
            )));
        }
        let len = self.len;
        write_positions(&mut self.k, k, len)?;
        write_positions(&mut self.v, v, len)?;
        self.len += t_new;
        Ok(())
    }

    /// Room for `max_t` positions, keeping the filled ones (a longer store is allocated
    /// and they are copied over; a shorter `max_t` than filled is refused).
    pub fn grow(&mut self, max_t: usize) -> Result<()> {
        let [b, h, cap, d_k] = self.k.dims()?;
        if max_t <= cap {
            return Ok(());
        }
        let d_v = self.v.shape()[3];
        let (k, v) = (self.keys()?, self.values()?);
        self.k = Tensor::zeros(&[b, h, max_t, d_k]);
        self.v = Tensor::zeros(&[b, h, max_t, d_v]);
        let len = self.len;
        write_positions(&mut self.k, &k, 0)?;
        write_positions(&mut self.v, &v, 0)?;
        self.len = len;
        Ok(())
    }

    /// The whole preallocated store, K (b, h_kv, max_t, d_k) and V (b, h_kv, max_t,
    /// d_v), of which the first [`LayerKvCache::len`] positions are filled: for kernels
    /// that read the cache in place (`AttentionParams::kv_len`). The tensors share the
    /// cache's storage; drop them before the next [`LayerKvCache::append`], which
    /// would otherwise have to copy the store.
    pub fn store(&self) -> (Tensor, Tensor) {
        (self.k.clone(), self.v.clone())
    }

    /// The cached keys of the first `len` positions.
    ///
    /// # Shapes
    /// → (b, h_kv, len, d_k)
    pub fn keys(&self) -> Result<Tensor> {
        self.k.narrow(2, 0, self.len)
    }

    /// The cached values of the first `len` positions.
    ///
    /// # Shapes
    /// → (b, h_kv, len, d_v)
    pub fn values(&self) -> Result<Tensor> {
        self.v.narrow(2, 0, self.len)
    }
}

/// Copy `src` (b, h, t_new, d) into positions start.. of `dst` (b, h, max_t, d): storage
/// bookkeeping, no arithmetic.
fn write_positions(dst: &mut Tensor, src: &Tensor, start: usize) -> Result<()> {
    let [_, _, max_t, d] = dst.dims()?;
    let [_, _, t_new, _] = src.dims()?;
    let block = t_new * d;
    if block == 0 {
        return Ok(());
    }
    let s = src.data();
    let out = dst.data_mut();
    for (bh, chunk) in s.chunks(block).enumerate() {
        let off = (bh * max_t + start) * d;
        out[off..off + block].copy_from_slice(chunk);
    }
    Ok(())
}

/// Per-layer key/value caches of a decoder stack.
#[derive(Clone, Debug)]
pub struct KvCache {
    layers: Vec<LayerKvCache>,
}

impl KvCache {
    /// Caches for `n_layers` layers, each (b, h_kv, max_t, d_k) for K and V.
    pub fn new(n_layers: usize, b: usize, h_kv: usize, max_t: usize, d_k: usize) -> Self {
        KvCache {
            layers: (0..n_layers)
                .map(|_| LayerKvCache::new(b, h_kv, max_t, d_k, d_k))
                .collect(),
        }
    }

    /// The number of layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Positions cached (those of layer 0; all layers agree after a full step).
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, LayerKvCache::len)
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Layer `i`'s cache.
    pub fn layer(&self, i: usize) -> Option<&LayerKvCache> {
        self.layers.get(i)
    }

    /// Layer `i`'s cache, mutably; errors if the cache has fewer layers.
    pub fn layer_mut(&mut self, i: usize) -> Result<&mut LayerKvCache> {
        let n = self.layers.len();
        self.layers.get_mut(i).ok_or_else(|| {
            Error::Argument(format!("KvCache has {n} layers, layer {i} asked for; build it for the model's decoder_layers"))
        })
    }

    /// The most positions every layer can hold.
    pub fn capacity(&self) -> usize {
        self.layers.first().map_or(0, LayerKvCache::capacity)
    }

    /// Room for `max_t` positions in every layer, keeping what is cached.
    pub fn grow(&mut self, max_t: usize) -> Result<()> {
        self.layers.iter_mut().try_for_each(|l| l.grow(max_t))
    }

    /// Forget positions from `len` on, in every layer.
    pub fn truncate(&mut self, len: usize) {
        self.layers.iter_mut().for_each(|l| l.truncate(len));
    }

    /// Empty every layer.
    pub fn clear(&mut self) {
        self.truncate(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn append_then_view_returns_what_went_in() -> TestResult {
        let mut c = LayerKvCache::new(2, 3, 5, 4, 4);
        let a = Tensor::from_fn(&[2, 3, 2, 4], |i| i as f32);
        let b = Tensor::from_fn(&[2, 3, 1, 4], |i| 100.0 + i as f32);
        c.append(&a, &a.scale(2.0))?;
        c.append(&b, &b.scale(2.0))?;
        assert_eq!(c.len(), 3);
        let want = Tensor::cat(&[&a, &b], 2)?;
        assert_eq!(c.keys()?.data(), want.data());
        assert_eq!(c.values()?.data(), want.scale(2.0).data());
        let big = Tensor::zeros(&[2, 3, 3, 4]);
        let e = c.append(&big, &big).unwrap_err().to_string();
        assert!(e.contains("capacity 5"), "{e}");
        let wrong = Tensor::zeros(&[2, 2, 1, 4]);
        assert!(c.append(&wrong, &wrong).is_err());
        c.grow(8)?;
        assert_eq!((c.len(), c.capacity()), (3, 8));
        assert_eq!(c.keys()?.data(), want.data());
        assert_eq!(c.values()?.data(), want.scale(2.0).data());
        c.append(&big, &big)?;
        assert_eq!(c.len(), 6);
        Ok(())
    }
}
