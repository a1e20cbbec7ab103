//! The loss curve of a run as a PNG line chart: the training loss of every step (light),
//! its exponential moving average (α = 0.05), and the validation loss at each evaluation
//! (points joined by a line).

use std::path::Path;

use plotters::prelude::*;

use crate::train::Metrics;
use crate::{Error, Result};

fn plot_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::format(path, format!("could not draw the loss curve: {e}"))
}

/// Draw `history` into `path` (PNG, 900 × 520).
pub fn loss_curve(history: &[Metrics], path: &Path) -> Result<()> {
    if history.is_empty() {
        return Err(Error::Argument("no steps to plot".into()));
    }
    crate::viz::register_fonts()?;
    let train: Vec<(f64, f64)> = history
        .iter()
        .map(|m| (m.step as f64, m.train_loss as f64))
        .collect();
    let mut ema = Vec::with_capacity(train.len());
    let mut acc = train[0].1;
    for &(s, l) in &train {
        acc = 0.95 * acc + 0.05 * l;
        ema.push((s, acc));
    }
    let val: Vec<(f64, f64)> = history
        .iter()
        .filter_map(|m| m.val_loss.map(|v| (m.step as f64, v as f64)))
        .collect();
    let finite = |v: f64| v.is_finite();
    let y_max = train
        .iter()
        .chain(&val)
        .map(|p| p.1)
        .filter(|v| finite(*v))
        .fold(0.0f64, f64::max)
        * 1.05;
    let y_min = train
        .iter()
        .chain(&val)
        .map(|p| p.1)
        .filter(|v| finite(*v))
        .fold(f64::INFINITY, f64::min);
    let y_min = (y_min * 0.95).min(y_max * 0.5).max(0.0);
    let x_max = (history.last().map_or(1, |m| m.step) as f64).max(1.0);
    let root = BitMapBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("loss (nats per token)", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, y_min..y_max.max(y_min + 1e-3))
        .map_err(|e| plot_err(path, e))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc("loss")
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| plot_err(path, e))?;
    chart
        .draw_series(LineSeries::new(train.iter().copied(), BLUE.mix(0.25)))
        .map_err(|e| plot_err(path, e))?
        .label("train (each step)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.mix(0.25)));
    chart
        .draw_series(LineSeries::new(ema.iter().copied(), BLUE.stroke_width(2)))
        .map_err(|e| plot_err(path, e))?
        .label("train (moving average)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    if !val.is_empty() {
        chart
            .draw_series(LineSeries::new(val.iter().copied(), RED.stroke_width(2)))
            .map_err(|e| plot_err(path, e))?
            .label("validation")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
        chart
            .draw_series(val.iter().map(|&p| Circle::new(p, 3, RED.filled())))
            .map_err(|e| plot_err(path, e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| plot_err(path, e))?;
    root.present().map_err(|e| plot_err(path, e))
}
