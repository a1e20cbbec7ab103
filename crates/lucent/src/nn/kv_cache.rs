//! `KvCache`: the keys and values of past positions, kept for incremental decoding.
//!
//! A causal decoder's keys and values for positions 0..t never change once computed, so
//! generating token t+1 needs only the new token's query, key and value: its K and V
//! are appended here and its query attends over the whole cache. Each layer's store is
//! preallocated as (b, h_kv, max_t, d_k) for K and (b, h_kv, max_t, d_v) for V; the first
//! `len` positions are filled. Cached decoding step by step equals the full causal
//! forward (tests hold it to 1e-5). A cache stores f32 numbers, or f16 ones
//! ([`KvStorage`]): a GGUF model's cache is f16, as llama.cpp's is, and since that
//! arithmetic rounds K and V to f16 before they are cached, nothing is lost while each
//! decoded token's attention reads half the bytes.

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use crate::tensor::Tensor;
use crate::{Error, Result};

/// The numbers a cache stores: f32, or f16 (llama.cpp's default KV cache type: half
/// the memory, and half the bytes each decoded token's attention reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvStorage {
    /// f32 numbers.
    F32,
    /// f16 numbers (their bits): what goes in is rounded to f16 to nearest even, so a
    /// model whose keys and values are f16 numbers already (llama.cpp's arithmetic)
    /// loses nothing.
    F16,
}

/// A layer's stores of K and V, (b, h_kv, max_t, d_k) and (b, h_kv, max_t, d_v).
#[derive(Clone, Debug)]
enum Store {
    F32 { k: Tensor, v: Tensor },
    F16 { k: Vec<u16>, v: Vec<u16> },
}

/// A cached layer's keys and values as attention reads them in place: the whole
/// preallocated stores, of which the first `len` positions are filled.
#[derive(Clone, Copy, Debug)]
pub enum KvStore<'a> {
    /// f32 stores: K (b, h_kv, max_t, d_k), V (b, h_kv, max_t, d_v).
    F32 {
        /// K.
        k: &'a Tensor,
        /// V.
        v: &'a Tensor,
    },
    /// f16 stores (bits), laid out as the f32 ones: `shape` is K's (b, h_kv, max_t,
    /// d_k), and V's last dimension is `d_v`.
    F16 {
        /// K's numbers.
        k: &'a [u16],
        /// V's numbers.
        v: &'a [u16],
        /// K's shape (b, h_kv, max_t, d_k).
        shape: [usize; 4],
        /// V's last dimension.
        d_v: usize,
    },
}

/// One layer's cached keys and values.
#[derive(Clone, Debug)]
pub struct LayerKvCache {
    /// K and V, first `len` positions valid.
    store: Store,
    /// K's shape (b, h_kv, max_t, d_k).
    shape: [usize; 4],
    d_v: usize,
    len: usize,
    /// Cross-attention's keys and values of the memory (an encoder-decoder's source),
    /// each (b, h_kv, s, d_k): computed at the first step, read by every later one.
    memory_kv: Option<(Tensor, Tensor)>,
}

impl LayerKvCache {
    /// An empty f32 cache for `b` sequences, `h_kv` heads, up to `max_t` positions.
    pub fn new(b: usize, h_kv: usize, max_t: usize, d_k: usize, d_v: usize) -> Self {
        LayerKvCache::with_storage(b, h_kv, max_t, d_k, d_v, KvStorage::F32)
    }

    /// An empty cache storing `storage` numbers.
    pub fn with_storage(
        b: usize,
        h_kv: usize,
        max_t: usize,
        d_k: usize,
        d_v: usize,
        storage: KvStorage,
    ) -> Self {
        LayerKvCache {
            store: Store::new(storage, [b, h_kv, max_t, d_k], d_v),
            shape: [b, h_kv, max_t, d_k],
            d_v,
            len: 0,
            memory_kv: None,
        }
    }

    /// The numbers this cache stores.
    pub fn storage(&self) -> KvStorage {
        match self.store {
            Store::F32 { .. } => KvStorage::F32,
            Store::F16 { .. } => KvStorage::F16,
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
        self.shape[2]
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

    /// Append new keys and values for the next positions (an f16 cache rounds them to
    /// f16).
    ///
    /// # Shapes
    /// k: (b, h_kv, t_new, d_k), v: (b, h_kv, t_new, d_v)
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<()> {
        let [b, h, max_t, d_k] = self.shape;
        let d_v = self.d_v;
        let [kb, kh, t_new, kd] = k.dims()?;
        if [kb, kh, kd] != [b, h, d_k] {
            return Err(Error::mismatch(
                "KvCache append (new keys vs cache)",
                k.shape(),
                &self.shape,
            ));
        }
        if v.shape() != [b, h, t_new, d_v] {
            return Err(Error::mismatch(
                "KvCache append (new values vs cache)",
                v.shape(),
                &[b, h, max_t, d_v],
            ));
        }
        if self.len + t_new > max_t {
            return Err(Error::Argument(format!(
                "KvCache is full: {} positions cached + {t_new} new > capacity {max_t}; make the cache longer (max_t)",
                self.len
            )));
        }
        self.store.write(
            k.data(),
            v.data(),
            [b * h, max_t, d_k, d_v],
            t_new,
            self.len,
        );
        self.len += t_new;
        Ok(())
    }

    /// Room for `max_t` positions, keeping the filled ones (a longer store is allocated
    /// and they are copied over; a shorter `max_t` than filled is refused).
    pub fn grow(&mut self, max_t: usize) -> Result<()> {
        let [b, h, cap, d_k] = self.shape;
        if max_t <= cap {
            return Ok(());
        }
        let (d_v, runs) = (self.d_v, [b * h, cap, max_t, self.len]);
        self.store = match &self.store {
            Store::F32 { k, v } => Store::F32 {
                k: Tensor::new(moved(k.data(), runs, d_k), &[b, h, max_t, d_k])?,
                v: Tensor::new(moved(v.data(), runs, d_v), &[b, h, max_t, d_v])?,
            },
            Store::F16 { k, v } => Store::F16 {
                k: moved(k, runs, d_k),
                v: moved(v, runs, d_v),
            },
        };
        self.shape[2] = max_t;
        Ok(())
    }

    /// The whole preallocated stores, K (b, h_kv, max_t, d_k) and V (b, h_kv, max_t,
    /// d_v), of which the first [`LayerKvCache::len`] positions are filled, as they are
    /// held: for kernels that read the cache in place (`AttentionParams::kv_len`).
    pub fn kv_store(&self) -> KvStore<'_> {
        match &self.store {
            Store::F32 { k, v } => KvStore::F32 { k, v },
            Store::F16 { k, v } => KvStore::F16 {
                k,
                v,
                shape: self.shape,
                d_v: self.d_v,
            },
        }
    }

    /// The whole preallocated store as f32 tensors, K (b, h_kv, max_t, d_k) and V (b,
    /// h_kv, max_t, d_v), of which the first [`LayerKvCache::len`] positions are filled.
    /// An f32 cache's tensors share its storage (drop them before the next
    /// [`LayerKvCache::append`], which would otherwise have to copy the store); an f16
    /// cache's are widened copies.
    pub fn store(&self) -> (Tensor, Tensor) {
        match &self.store {
            Store::F32 { k, v } => (k.clone(), v.clone()),
            Store::F16 { k, v } => {
                let [b, h, max_t, d_k] = self.shape;
                (
                    widen(k, &[b, h, max_t, d_k]),
                    widen(v, &[b, h, max_t, self.d_v]),
                )
            }
        }
    }

    /// The cached keys and values of positions `start .. start + n` (within the filled
    /// ones), as f32.
    ///
    /// # Shapes
    /// → k (b, h_kv, n, d_k), v (b, h_kv, n, d_v)
    pub fn positions(&self, start: usize, n: usize) -> Result<(Tensor, Tensor)> {
        if start + n > self.len {
            return Err(Error::Argument(format!(
                "KvCache: positions {start}..{} asked of {} filled",
                start + n,
                self.len
            )));
        }
        match &self.store {
            Store::F32 { k, v } => Ok((k.narrow(2, start, n)?, v.narrow(2, start, n)?)),
            Store::F16 { k, v } => {
                let [b, h, max_t, d_k] = self.shape;
                let part = |xs: &[u16], d: usize| {
                    let mut out = Vec::with_capacity(b * h * n * d);
                    for bh in 0..b * h {
                        let run = &xs[(bh * max_t + start) * d..][..n * d];
                        out.extend(run.iter().map(|&x| half::f16::from_bits(x).to_f32()));
                    }
                    Tensor::new(out, &[b, h, n, d])
                };
                Ok((part(k, d_k)?, part(v, self.d_v)?))
            }
        }
    }

    /// The cached keys of the first `len` positions (as f32).
    ///
    /// # Shapes
    /// → (b, h_kv, len, d_k)
    pub fn keys(&self) -> Result<Tensor> {
        Ok(self.positions(0, self.len)?.0)
    }

    /// The cached values of the first `len` positions (as f32).
    ///
    /// # Shapes
    /// → (b, h_kv, len, d_v)
    pub fn values(&self) -> Result<Tensor> {
        Ok(self.positions(0, self.len)?.1)
    }
}

impl Store {
    /// Zeroed stores of `storage`, K of `shape` and V of its shape with last dimension `d_v`.
    fn new(storage: KvStorage, shape: [usize; 4], d_v: usize) -> Store {
        let [b, h, max_t, d_k] = shape;
        match storage {
            KvStorage::F32 => Store::F32 {
                k: Tensor::zeros(&shape),
                v: Tensor::zeros(&[b, h, max_t, d_v]),
            },
            KvStorage::F16 => Store::F16 {
                k: vec![0; b * h * max_t * d_k],
                v: vec![0; b * h * max_t * d_v],
            },
        }
    }

    /// `k` (bh, t_new, d_k) and `v` (bh, t_new, d_v) into positions `start..` of each of
    /// the `bh` heads' `max_t` (`dims` = [bh, max_t, d_k, d_v]).
    fn write(&mut self, k: &[f32], v: &[f32], dims: [usize; 4], t_new: usize, start: usize) {
        let [bh, max_t, d_k, d_v] = dims;
        // Head by head, `src`'s t_new rows of d numbers into `dst` at position `start`.
        let put = |d: usize, src: &[f32], f: &mut dyn FnMut(usize, &[f32])| {
            let block = t_new * d;
            if block == 0 {
                return;
            }
            for (i, chunk) in src.chunks(block).take(bh).enumerate() {
                f((i * max_t + start) * d, chunk);
            }
        };
        match self {
            Store::F32 { k: sk, v: sv } => {
                let (sk, sv) = (sk.data_mut(), sv.data_mut());
                put(d_k, k, &mut |at, c| sk[at..at + c.len()].copy_from_slice(c));
                put(d_v, v, &mut |at, c| sv[at..at + c.len()].copy_from_slice(c));
            }
            Store::F16 { k: sk, v: sv } => {
                // Rounded to nearest even (with F16C where the CPU has it).
                let round = |to: &mut [u16], c: &[f32]| {
                    to.reinterpret_cast_mut::<half::f16>()
                        .convert_from_f32_slice(c)
                };
                put(d_k, k, &mut |at, c| round(&mut sk[at..at + c.len()], c));
                put(d_v, v, &mut |at, c| round(&mut sv[at..at + c.len()], c));
            }
        }
    }
}

/// f16 bits widened to an f32 tensor of `shape` (`xs` holds its numbers).
fn widen(xs: &[u16], shape: &[usize]) -> Tensor {
    Tensor::from_fn(shape, |i| half::f16::from_bits(xs[i]).to_f32())
}

/// Every head's filled positions copied to the front of a longer run: `from` (heads,
/// cap, d) of which the first `len` positions are filled → (heads, max_t, d), where
/// `runs` = [heads, cap, max_t, len].
fn moved<T: Copy + Default>(from: &[T], runs: [usize; 4], d: usize) -> Vec<T> {
    let [heads, cap, max_t, len] = runs;
    let mut to = vec![T::default(); heads * max_t * d];
    for bh in 0..heads {
        to[bh * max_t * d..][..len * d].copy_from_slice(&from[bh * cap * d..][..len * d]);
    }
    to
}

/// Per-layer key/value caches of a decoder stack.
#[derive(Clone, Debug)]
pub struct KvCache {
    layers: Vec<LayerKvCache>,
}

impl KvCache {
    /// f32 caches for `n_layers` layers, each (b, h_kv, max_t, d_k) for K and V.
    pub fn new(n_layers: usize, b: usize, h_kv: usize, max_t: usize, d_k: usize) -> Self {
        KvCache::with_storage(n_layers, b, h_kv, max_t, d_k, KvStorage::F32)
    }

    /// Caches of `storage` numbers for `n_layers` layers, each (b, h_kv, max_t, d_k)
    /// for K and V.
    pub fn with_storage(
        n_layers: usize,
        b: usize,
        h_kv: usize,
        max_t: usize,
        d_k: usize,
        storage: KvStorage,
    ) -> Self {
        KvCache {
            layers: (0..n_layers)
                .map(|_| LayerKvCache::with_storage(b, h_kv, max_t, d_k, d_k, storage))
                .collect(),
        }
    }

    /// The numbers the layers store (f32 for a cache of no layers).
    pub fn storage(&self) -> KvStorage {
        self.layers
            .first()
            .map_or(KvStorage::F32, LayerKvCache::storage)
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

    /// An f16 cache keeps f16 numbers exactly and rounds others to nearest even; its
    /// views, its growth and its in-place store agree with what went in.
    #[test]
    fn an_f16_cache_holds_f16_numbers_exactly() -> TestResult {
        let mut c = LayerKvCache::with_storage(1, 2, 4, 3, 2, KvStorage::F16);
        assert_eq!(c.storage(), KvStorage::F16);
        // f16 numbers (multiples of 1/8 below 2048) and numbers that need rounding.
        let k = Tensor::from_fn(&[1, 2, 2, 3], |i| i as f32 / 8.0 - 0.5);
        let v = Tensor::new(
            vec![1.0 + 1e-4, -3.0, 65504.0, 1.0 / 3.0, 0.1, -0.0, 7.0, 1e-8],
            &[1, 2, 2, 2],
        )?;
        c.append(&k, &v)?;
        let round = |t: &Tensor| -> Vec<f32> {
            t.data()
                .iter()
                .map(|&x| half::f16::from_f32(x).to_f32())
                .collect()
        };
        assert_eq!(c.keys()?.data(), k.data(), "f16 numbers kept exactly");
        let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(c.values()?.data()), bits(&round(&v)), "others rounded");
        let one = Tensor::from_fn(&[1, 2, 1, 3], |i| 100.0 + i as f32);
        let one_v = Tensor::from_fn(&[1, 2, 1, 2], |i| -(i as f32));
        c.append(&one, &one_v)?;
        c.grow(9)?;
        assert_eq!((c.len(), c.capacity(), c.storage()), (3, 9, KvStorage::F16));
        let want_k = Tensor::cat(&[&k, &one], 2)?;
        assert_eq!(c.keys()?.data(), want_k.data(), "kept through grow");
        let (k1, v1) = c.positions(1, 2)?;
        assert_eq!(k1.data(), want_k.narrow(2, 1, 2)?.data());
        assert_eq!(v1.shape(), &[1, 2, 2, 2]);
        assert!(c.positions(2, 2).is_err(), "past the filled positions");
        // The in-place store: head 1's third position holds 103, 104, 105.
        match c.kv_store() {
            KvStore::F16 { k, shape, d_v, .. } => {
                assert_eq!((shape, d_v), ([1, 2, 9, 3], 2));
                let at = (9 + 2) * 3;
                let got: Vec<f32> = k[at..at + 3]
                    .iter()
                    .map(|&x| half::f16::from_bits(x).to_f32())
                    .collect();
                assert_eq!(got, [103.0, 104.0, 105.0]);
            }
            KvStore::F32 { .. } => return Err("an f16 store".into()),
        }
        let (ks, _) = c.store();
        assert_eq!(ks.narrow(2, 0, 3)?.data(), want_k.data(), "widened store");
        Ok(())
    }
}
