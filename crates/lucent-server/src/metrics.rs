//! `/metrics`: the server's figures in the Prometheus / OpenMetrics text format (what a
//! load balancer or Prometheus scrapes), kept with the `prometheus-client` crate.
//!
//! | metric | kind | labels |
//! | --- | --- | --- |
//! | `lucent_requests_total` | counter | route, status |
//! | `lucent_requests_in_flight` | gauge | |
//! | `lucent_prompt_tokens_total`, `lucent_generated_tokens_total` | counter | model |
//! | `lucent_prompt_tokens_cached_total`, `lucent_prompt_tokens_computed_total` | counter | model |
//! | `lucent_prompt_cache_bytes`, `lucent_prompt_cache_blocks`, `lucent_prompt_cache_capacity_bytes` | gauge | model |
//! | `lucent_time_to_first_token_seconds`, `lucent_inter_token_latency_seconds` | histogram | model |
//! | `lucent_decode_batch_size` | histogram | model |
//! | `lucent_queue_depth`, `lucent_busy_slots`, `lucent_slots` | gauge | model |
//! | `lucent_kv_cache_bytes`, `lucent_kv_cache_capacity_bytes` | gauge | model |
//! | `lucent_requests_cancelled_total`, `lucent_requests_timed_out_total` | counter | model |
//! | `lucent_ready`, `lucent_draining` | gauge | |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Labels of a request count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The route (`/v1/chat/completions`, …).
    pub route: String,
    /// The HTTP status answered.
    pub status: String,
}

/// Labels of a per-model figure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    /// The model's name in requests.
    pub model: String,
}

type HistogramFamily = Family<ModelLabels, Histogram, fn() -> Histogram>;

/// Every figure the server keeps.
pub struct Metrics {
    registry: Registry,
    /// Requests answered, by route and status.
    pub requests: Family<RouteLabels, Counter>,
    /// Requests being answered now.
    pub in_flight: Gauge,
    /// 1 once every model is loaded.
    pub ready: Gauge,
    /// 1 while shutting down.
    pub draining: Gauge,
    prompt_tokens: Family<ModelLabels, Counter>,
    generated_tokens: Family<ModelLabels, Counter>,
    cancelled: Family<ModelLabels, Counter>,
    timed_out: Family<ModelLabels, Counter>,
    ttft: HistogramFamily,
    itl: HistogramFamily,
    batch_size: HistogramFamily,
    queue_depth: Family<ModelLabels, Gauge>,
    busy_slots: Family<ModelLabels, Gauge>,
    slots: Family<ModelLabels, Gauge>,
    kv_used_bytes: Family<ModelLabels, Gauge>,
    kv_capacity_bytes: Family<ModelLabels, Gauge>,
    prompt_cache: PromptCacheFamilies,
}

/// The prompt cache's figures, by model.
#[derive(Default)]
struct PromptCacheFamilies {
    cached_tokens: Family<ModelLabels, Counter>,
    computed_tokens: Family<ModelLabels, Counter>,
    bytes: Family<ModelLabels, Gauge>,
    blocks: Family<ModelLabels, Gauge>,
    capacity_bytes: Family<ModelLabels, Gauge>,
}

impl PromptCacheFamilies {
    fn register(&self, r: &mut Registry) {
        r.register(
            "lucent_prompt_tokens_cached",
            "Prompt tokens whose keys and values were taken from the prompt cache",
            self.cached_tokens.clone(),
        );
        r.register(
            "lucent_prompt_tokens_computed",
            "Prompt tokens computed by a prefill (not taken from the prompt cache)",
            self.computed_tokens.clone(),
        );
        r.register(
            "lucent_prompt_cache_bytes",
            "Bytes the prompt cache holds",
            self.bytes.clone(),
        );
        r.register(
            "lucent_prompt_cache_blocks",
            "Blocks the prompt cache holds",
            self.blocks.clone(),
        );
        r.register(
            "lucent_prompt_cache_capacity_bytes",
            "Most bytes the prompt cache may hold (lucent serve --cache-ram)",
            self.capacity_bytes.clone(),
        );
    }

    fn model(&self, l: &ModelLabels) -> PromptCacheMetrics {
        PromptCacheMetrics {
            cached_tokens: self.cached_tokens.get_or_create_owned(l),
            computed_tokens: self.computed_tokens.get_or_create_owned(l),
            bytes: self.bytes.get_or_create_owned(l),
            blocks: self.blocks.get_or_create_owned(l),
            capacity_bytes: self.capacity_bytes.get_or_create_owned(l),
        }
    }
}

/// One model's prompt-cache figures.
#[derive(Clone, Debug)]
pub struct PromptCacheMetrics {
    /// Prompt tokens taken from the cache.
    pub cached_tokens: Counter,
    /// Prompt tokens computed.
    pub computed_tokens: Counter,
    /// Bytes held.
    pub bytes: Gauge,
    /// Blocks held.
    pub blocks: Gauge,
    /// Most bytes it may hold.
    pub capacity_bytes: Gauge,
}

/// One model's figures (handles sharing the registry's counters).
#[derive(Clone, Debug)]
pub struct ModelMetrics {
    /// Prompt tokens read.
    pub prompt_tokens: Counter,
    /// Tokens generated.
    pub generated_tokens: Counter,
    /// Requests whose client went away before the end.
    pub cancelled: Counter,
    /// Requests that ran past the timeout.
    pub timed_out: Counter,
    /// Seconds from arrival to the first token.
    pub ttft: Histogram,
    /// Seconds between a request's tokens.
    pub itl: Histogram,
    /// Sequences per decode step.
    pub batch_size: Histogram,
    /// Requests waiting for a slot.
    pub queue_depth: Gauge,
    /// Slots generating or reading a prompt.
    pub busy_slots: Gauge,
    /// Slots in all.
    pub slots: Gauge,
    /// Bytes of the busy slots' filled cache positions.
    pub kv_used_bytes: Gauge,
    /// Bytes of every slot's cache.
    pub kv_capacity_bytes: Gauge,
    /// The prompt cache's figures.
    pub prompt_cache: PromptCacheMetrics,
}

fn latency() -> Histogram {
    // 1 ms … ~33 s
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn batch() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 8))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every figure at zero, registered.
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let m = Metrics {
            requests: Family::default(),
            in_flight: Gauge::default(),
            ready: Gauge::default(),
            draining: Gauge::default(),
            prompt_tokens: Family::default(),
            generated_tokens: Family::default(),
            cancelled: Family::default(),
            timed_out: Family::default(),
            ttft: Family::new_with_constructor(latency as fn() -> Histogram),
            itl: Family::new_with_constructor(latency as fn() -> Histogram),
            batch_size: Family::new_with_constructor(batch as fn() -> Histogram),
            queue_depth: Family::default(),
            busy_slots: Family::default(),
            slots: Family::default(),
            kv_used_bytes: Family::default(),
            kv_capacity_bytes: Family::default(),
            prompt_cache: PromptCacheFamilies::default(),
            registry: Registry::default(),
        };
        r.register(
            "lucent_requests",
            "HTTP requests answered, by route and status",
            m.requests.clone(),
        );
        r.register(
            "lucent_requests_in_flight",
            "HTTP requests being answered now",
            m.in_flight.clone(),
        );
        r.register(
            "lucent_ready",
            "1 once every model is loaded (GET /health answers 200)",
            m.ready.clone(),
        );
        r.register(
            "lucent_draining",
            "1 while the server shuts down (no new requests)",
            m.draining.clone(),
        );
        r.register(
            "lucent_prompt_tokens",
            "Prompt tokens read",
            m.prompt_tokens.clone(),
        );
        r.register(
            "lucent_generated_tokens",
            "Tokens generated",
            m.generated_tokens.clone(),
        );
        r.register(
            "lucent_requests_cancelled",
            "Generations stopped because the client went away",
            m.cancelled.clone(),
        );
        r.register(
            "lucent_requests_timed_out",
            "Generations stopped at the per-request timeout",
            m.timed_out.clone(),
        );
        r.register(
            "lucent_time_to_first_token_seconds",
            "Seconds from a request's arrival to its first token",
            m.ttft.clone(),
        );
        r.register(
            "lucent_inter_token_latency_seconds",
            "Seconds between consecutive tokens of a request",
            m.itl.clone(),
        );
        r.register(
            "lucent_decode_batch_size",
            "Sequences decoded together per step",
            m.batch_size.clone(),
        );
        r.register(
            "lucent_queue_depth",
            "Requests waiting for a slot",
            m.queue_depth.clone(),
        );
        r.register(
            "lucent_busy_slots",
            "Slots generating or reading a prompt",
            m.busy_slots.clone(),
        );
        r.register(
            "lucent_slots",
            "Slots in all (lucent serve --parallel)",
            m.slots.clone(),
        );
        r.register(
            "lucent_kv_cache_bytes",
            "Bytes of the KV-cache positions the busy slots hold",
            m.kv_used_bytes.clone(),
        );
        r.register(
            "lucent_kv_cache_capacity_bytes",
            "Bytes of every slot's KV cache (allocated at start)",
            m.kv_capacity_bytes.clone(),
        );
        m.prompt_cache.register(&mut r);
        Metrics { registry: r, ..m }
    }

    /// The figures of model `name`.
    pub fn model(&self, name: &str) -> ModelMetrics {
        let l = ModelLabels {
            model: name.to_string(),
        };
        ModelMetrics {
            prompt_tokens: self.prompt_tokens.get_or_create_owned(&l),
            generated_tokens: self.generated_tokens.get_or_create_owned(&l),
            cancelled: self.cancelled.get_or_create_owned(&l),
            timed_out: self.timed_out.get_or_create_owned(&l),
            ttft: self.ttft.get_or_create_owned(&l),
            itl: self.itl.get_or_create_owned(&l),
            batch_size: self.batch_size.get_or_create_owned(&l),
            queue_depth: self.queue_depth.get_or_create_owned(&l),
            busy_slots: self.busy_slots.get_or_create_owned(&l),
            slots: self.slots.get_or_create_owned(&l),
            kv_used_bytes: self.kv_used_bytes.get_or_create_owned(&l),
            kv_capacity_bytes: self.kv_capacity_bytes.get_or_create_owned(&l),
            prompt_cache: self.prompt_cache.model(&l),
        }
    }

    /// Count one answered request.
    pub fn count(&self, route: &str, status: u16) {
        self.requests
            .get_or_create(&RouteLabels {
                route: route.to_string(),
                status: status.to_string(),
            })
            .inc();
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_labelled_figures() {
        let m = Metrics::new();
        m.count("/v1/completions", 429);
        let mm = m.model("smollm2");
        mm.busy_slots.set(3);
        mm.ttft.observe(0.02);
        let text = m.render();
        assert!(
            text.contains("lucent_requests_total{route=\"/v1/completions\",status=\"429\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("lucent_busy_slots{model=\"smollm2\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("lucent_time_to_first_token_seconds_count{model=\"smollm2\"} 1"),
            "{text}"
        );
    }
}
