//! Progress bars for long library steps (fetching, hashing, unpacking), drawn with
//! indicatif on stderr. The library reports through `lucent::io::fetch::Progress`.

use indicatif::{ProgressBar, ProgressStyle};
use lucent::io::fetch::Progress;

/// A [`Progress`] that draws one bar per step on stderr (hidden when not a terminal).
#[derive(Default)]
pub struct Bars {
    bar: Option<ProgressBar>,
}

impl Progress for Bars {
    fn begin(&mut self, step: &str, total: Option<u64>) {
        let bar = match total {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template(
                    "{msg:40} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {msg} {bytes} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        bar.set_message(step.to_string());
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        self.bar = Some(bar);
    }

    fn advance(&mut self, bytes: u64) {
        if let Some(b) = &self.bar {
            b.inc(bytes);
        }
    }

    fn end(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
            eprintln!("✓ {}", b.message());
        }
    }
}
