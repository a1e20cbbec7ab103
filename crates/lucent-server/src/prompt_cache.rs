//! The prompt cache: keys and values of prompt blocks that any request computed, taken
//! by later requests that start with the same tokens (in any slot), instead of computed
//! again.
//!
//! A prompt is cut into blocks of [`BLOCK`] tokens. Block `i` covers positions
//! `i·B .. (i+1)·B` and is keyed by its **whole prefix** (every token id from 0 to its
//! end): the key is a chain hash, `key_i = hash(key_{i-1}, ids of block i)`, and the
//! block keeps the prefix's ids, compared on every hit, so a hash collision can never
//! hand out another prompt's keys and values. A block holds every layer's K rows
//! (1, h_kv, B, d_k) and V rows (1, h_kv, B, d_v) of its positions.
//!
//! When a request is admitted, the longest run of cached blocks from its start is
//! copied into its slot's [`KvCache`], and the rest of the prompt is prefilled from
//! there, cut by [`prompt_chunks`] from the first uncached position. The logits are the
//! same bits as a whole prefill's, because every cut respects `prompt_chunks`' rules:
//! a block starts at a multiple of 4 and holds a multiple of 4 rows, it was computed
//! by a prefill whose pieces all had at least [`MIN_PROMPT_CHUNK`] rows (a block is
//! B ≥ 8 prompt rows, never decoded ones), and [`usable_blocks`] leaves at least
//! `MIN_PROMPT_CHUNK` tokens to compute (one block fewer when fewer would remain; a
//! prompt of whole blocks recomputes its last block, whose last row gives the logits).
//! Sliding-window attention (Gemma 3's local layers) needs nothing more: the window is
//! a mask over a cache that keeps every position, so a cached row is the row a whole
//! prefill keeps.
//!
//! Blocks computed by a prefill (whole blocks only) are inserted after the piece that
//! completed them. When the cache's bytes would pass its capacity (`--cache-ram`), the
//! least recently used blocks go. A hit or an insertion touches its chain from the last
//! block to the first, so a block is always more recently used than the blocks after it
//! and eviction takes the ends of chains first. The scheduler thread owns the cache: no
//! lock.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use lucent::nn::KvCache;
#[cfg(doc)]
use lucent::pipeline::generate::prompt_chunks;
use lucent::pipeline::generate::MIN_PROMPT_CHUNK;
use lucent::Tensor;

/// Tokens per block B. A multiple of 4 and at least [`MIN_PROMPT_CHUNK`] (the cut
/// rules); 64 because it equals the default `--prefill-chunk`, so every whole prefill
/// piece completes exactly one block, a shared system prompt loses at most 63 tokens
/// to the block grid, and the per-block bookkeeping (a map entry, the prefix's ids) is
/// small beside a block's K/V (64 × 46 KB for SmolLM2-135M).
pub const BLOCK: usize = 64;

/// How many leading whole blocks of a prompt of `t` tokens may be taken from the cache:
/// at least [`MIN_PROMPT_CHUNK`] tokens must remain to be computed (the last piece's
/// rows keep their order, and the last row gives the logits).
///
/// ```
/// use lucent_server::prompt_cache::{usable_blocks, BLOCK};
/// assert_eq!(usable_blocks(BLOCK - 1), 0);
/// assert_eq!(usable_blocks(3 * BLOCK), 2); // whole blocks: the last is computed
/// assert_eq!(usable_blocks(3 * BLOCK + 7), 2); // a tail of 7 < 8: one block fewer
/// assert_eq!(usable_blocks(3 * BLOCK + 8), 3);
/// ```
pub fn usable_blocks(t: usize) -> usize {
    t.saturating_sub(MIN_PROMPT_CHUNK) / BLOCK
}

/// The chain keys of `prompt`'s whole blocks: `keys[i]` stands for `prompt[..(i+1)·B]`.
fn chain_keys(prompt: &[u32]) -> Vec<u64> {
    let mut keys = Vec::with_capacity(prompt.len() / BLOCK);
    let mut parent = 0u64;
    for ids in prompt.chunks_exact(BLOCK) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        parent.hash(&mut h);
        ids.hash(&mut h);
        parent = h.finish();
        keys.push(parent);
    }
    keys
}

/// One cached block.
struct Block {
    /// Every token id from position 0 to the block's end (compared on a hit).
    prefix: Box<[u32]>,
    /// Per layer: K (1, h_kv, B, d_k) and V (1, h_kv, B, d_v) of the block's positions.
    layers: Vec<(Tensor, Tensor)>,
    /// Bytes it holds (K/V and prefix ids).
    bytes: usize,
    /// When it was last used (a tick of the cache's clock).
    used: u64,
}

/// The blocks of one model's prompts, least recently used first out.
pub struct PromptCache {
    /// Most bytes held (0: off).
    capacity: usize,
    bytes: usize,
    blocks: HashMap<u64, Block>,
    /// Keys by their last use, oldest first.
    order: BTreeMap<u64, u64>,
    clock: u64,
}

impl std::fmt::Debug for PromptCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptCache")
            .field("capacity", &self.capacity)
            .field("bytes", &self.bytes)
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

impl PromptCache {
    /// An empty cache of at most `capacity` bytes (0: off, nothing is kept).
    pub fn new(capacity: usize) -> PromptCache {
        PromptCache {
            capacity,
            bytes: 0,
            blocks: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
        }
    }

    /// Whether it keeps anything.
    pub fn is_on(&self) -> bool {
        self.capacity > 0
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Blocks held now.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether it holds no block.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The block under `key` if it stands for exactly `prefix`.
    fn get(&self, key: u64, prefix: &[u32]) -> Option<&Block> {
        self.blocks.get(&key).filter(|b| &*b.prefix == prefix)
    }

    /// Mark the blocks of `keys` used now, the last first (so each block is more
    /// recently used than the ones after it).
    fn touch(&mut self, keys: &[u64]) {
        for key in keys.iter().rev() {
            if let Some(b) = self.blocks.get_mut(key) {
                self.order.remove(&b.used);
                self.clock += 1;
                b.used = self.clock;
                self.order.insert(self.clock, *key);
            }
        }
    }

    /// Copy the longest run of `prompt`'s cached blocks from its start, at most `most`
    /// blocks, into `cache` (emptied first); the number of blocks copied. On an error
    /// the cache is left empty (the prompt is then computed whole).
    pub fn take(&mut self, prompt: &[u32], most: usize, cache: &mut KvCache) -> usize {
        cache.clear();
        let keys = chain_keys(prompt);
        let n = keys
            .iter()
            .take(most)
            .enumerate()
            .take_while(|&(i, &k)| self.get(k, &prompt[..(i + 1) * BLOCK]).is_some())
            .count();
        let copied = keys[..n].iter().enumerate().try_for_each(|(i, &k)| {
            let Some(b) = self.get(k, &prompt[..(i + 1) * BLOCK]) else {
                return Err(lucent::Error::Argument(
                    "a cached block went missing".into(),
                ));
            };
            for (l, (kt, vt)) in b.layers.iter().enumerate() {
                cache.layer_mut(l)?.append(kt, vt)?;
            }
            Ok(())
        });
        if copied.is_err() {
            cache.clear();
            return 0;
        }
        self.touch(&keys[..n]);
        n
    }

    /// Keep `prompt`'s whole blocks `from..to` (their positions already in `cache`),
    /// making room by dropping the least recently used blocks. Room is never made by
    /// dropping the blocks before them (the prompt's own chain): when only those are
    /// left, the rest is not kept, so every block held has its parent held.
    ///
    /// # Errors
    /// When `cache` does not hold the blocks' positions.
    pub fn insert(
        &mut self,
        prompt: &[u32],
        from: usize,
        to: usize,
        cache: &KvCache,
    ) -> lucent::Result<()> {
        let to = to.min(prompt.len() / BLOCK);
        if !self.is_on() || to <= from {
            return Ok(());
        }
        let keys = chain_keys(&prompt[..to * BLOCK]);
        self.touch(&keys[..from]);
        for i in from..to {
            let prefix = &prompt[..(i + 1) * BLOCK];
            if self.get(keys[i], prefix).is_some() {
                continue; // another slot kept it first
            }
            if self.blocks.contains_key(&keys[i]) {
                break; // a hash collision: the first prefix keeps the key
            }
            let mut layers = Vec::with_capacity(cache.n_layers());
            let mut bytes = std::mem::size_of_val(prefix);
            for l in 0..cache.n_layers() {
                let Some(layer) = cache.layer(l) else { break };
                // (1, h_kv, B, d_k) and (1, h_kv, B, d_v), as f32.
                let (k, v) = layer.positions(i * BLOCK, BLOCK)?;
                bytes += (k.numel() + v.numel()) * std::mem::size_of::<f32>();
                layers.push((k, v));
            }
            if !self.make_room(bytes, &keys[..i]) {
                break;
            }
            self.clock += 1;
            self.order.insert(self.clock, keys[i]);
            self.bytes += bytes;
            self.blocks.insert(
                keys[i],
                Block {
                    prefix: prefix.into(),
                    layers,
                    bytes,
                    used: self.clock,
                },
            );
        }
        self.touch(&keys);
        Ok(())
    }

    /// Drop least recently used blocks until `bytes` more fit, but none of `keep`;
    /// false when they cannot fit.
    fn make_room(&mut self, bytes: usize, keep: &[u64]) -> bool {
        while self.bytes + bytes > self.capacity {
            let Some((&used, &key)) = self.order.first_key_value() else {
                return false;
            };
            if keep.contains(&key) {
                return false;
            }
            self.order.remove(&used);
            if let Some(b) = self.blocks.remove(&key) {
                self.bytes -= b.bytes;
            }
        }
        true
    }
}

/// Bytes of the default `--cache-ram`: a quarter of the machine's physical memory, at
/// most 4 GiB (1 GiB where the memory cannot be read).
pub fn default_cache_ram() -> u64 {
    const GIB: u64 = 1 << 30;
    physical_memory().map_or(GIB, |m| (m / 4).min(4 * GIB))
}

/// The machine's physical memory in bytes (`MemTotal` of `/proc/meminfo`), if known.
fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A size in bytes as flags take it: a number with an optional unit, `B`, `KB` `MB`
/// `GB` `TB` (powers of 1000) or `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (powers of
/// 1024), any case: `0`, `512MiB`, `2GiB`, `1.5G`.
///
/// # Errors
/// A message saying what a size looks like, for clap to print after the flag's name.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "expected a size such as 0, 512MiB or 2GiB (unknown unit '{unit}')"
            ))
        }
    };
    let x: f64 = num
        .parse()
        .ok()
        .filter(|x: &f64| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("expected a size such as 0, 512MiB or 2GiB (got '{s}')"))?;
    Ok((x * scale as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-layer cache whose K and V rows at position p are all p (and -p).
    fn filled(t: usize) -> KvCache {
        let mut c = KvCache::new(2, 1, 2, 4 * BLOCK, 3);
        for l in 0..2 {
            let k = Tensor::from_fn(&[1, 2, t, 3], |i| ((i / 3) % t) as f32 + l as f32);
            let v = k.scale(-1.0);
            c.layer_mut(l).unwrap().append(&k, &v).unwrap();
        }
        c
    }

    fn block_bytes() -> usize {
        2 * 2 * (2 * BLOCK * 3) * 4 // layers × (K, V) × rows × f32
    }

    #[test]
    fn whole_prefix_is_the_key_and_rows_come_back() {
        let prompt: Vec<u32> = (0..(3 * BLOCK + 20) as u32).collect();
        let mut pc = PromptCache::new(1 << 30);
        let full = filled(prompt.len());
        pc.insert(&prompt, 0, 3, &full).unwrap();
        assert_eq!(pc.len(), 3);
        let mut c = KvCache::new(2, 1, 2, 4 * BLOCK, 3);
        assert_eq!(pc.take(&prompt, usable_blocks(prompt.len()), &mut c), 3);
        assert_eq!(c.len(), 3 * BLOCK);
        for l in 0..2 {
            let (got, want) = (c.layer(l).unwrap(), full.layer(l).unwrap());
            let want_k = want.keys().unwrap().narrow(2, 0, 3 * BLOCK).unwrap();
            assert_eq!(got.keys().unwrap().data(), want_k.data());
            let want_v = want.values().unwrap().narrow(2, 0, 3 * BLOCK).unwrap();
            assert_eq!(got.values().unwrap().data(), want_v.data());
        }
        // Another token in block 1: only block 0 is shared.
        let mut other = prompt.clone();
        other[BLOCK + 5] = 9999;
        assert_eq!(pc.take(&other, 3, &mut c), 1);
        assert_eq!(c.len(), BLOCK);
        // At most `most` blocks.
        assert_eq!(pc.take(&prompt, 2, &mut c), 2);
    }

    #[test]
    fn least_recently_used_blocks_go_first() {
        let a: Vec<u32> = (0..(2 * BLOCK) as u32).collect();
        let b: Vec<u32> = (1000..1000 + (2 * BLOCK) as u32).collect();
        let mut pc = PromptCache::new(3 * (block_bytes() + 2 * BLOCK * 4));
        pc.insert(&a, 0, 2, &filled(2 * BLOCK)).unwrap();
        pc.insert(&b, 0, 1, &filled(2 * BLOCK)).unwrap();
        assert_eq!(pc.len(), 3);
        let mut c = KvCache::new(2, 1, 2, 4 * BLOCK, 3);
        // Use b's block, then add b's second: a's chain end (block 1) goes first.
        assert_eq!(pc.take(&b, 1, &mut c), 1);
        pc.insert(&b, 1, 2, &filled(2 * BLOCK)).unwrap();
        assert_eq!(pc.len(), 3);
        assert_eq!(pc.take(&a, 2, &mut c), 1);
        assert_eq!(pc.take(&b, 2, &mut c), 2);
        assert!(pc.bytes() <= 3 * (block_bytes() + 2 * BLOCK * 4));
        // A chain longer than the cache keeps its head (never its own blocks dropped).
        let mut two = PromptCache::new(2 * (block_bytes() + 3 * BLOCK * 4));
        let long: Vec<u32> = (0..(3 * BLOCK) as u32).collect();
        two.insert(&long, 0, 3, &filled(3 * BLOCK)).unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two.take(&long, 3, &mut c), 2);
        // A cache too small for one block keeps none.
        let mut tiny = PromptCache::new(block_bytes() / 2);
        tiny.insert(&a, 0, 2, &filled(2 * BLOCK)).unwrap();
        assert!(tiny.is_empty());
        assert_eq!(tiny.bytes(), 0);
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("0"), Ok(0));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("2gb"), Ok(2_000_000_000));
        assert_eq!(parse_bytes("1.5G"), Ok(3 << 29));
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("-1G").is_err());
        assert!(default_cache_ram() <= 4 << 30);
    }
}
