//! Pictures of matrices: attention weights, masks, position encodings.
//!
//! A [`Panel`] is one heatmap: a matrix, a title, optional row and column labels
//! (tokens), a colour map and a colour bar. [`heatmap`] draws one panel;
//! [`heatmap_grid`] draws several side by side in one image (BERT vs GPT vs T5 masks,
//! or one panel per attention head). The file's extension picks the format: `.png`
//! (bitmap) or `.svg`.
//!
//! Each cell (i, j) is coloured by cmap((m[i][j] − lo) / (hi − lo)), with [lo, hi] the
//! panel's range (its min and max unless set; for a diverging map, symmetric about 0).
//! Cells holding −∞ (masked scores) are drawn light grey.
//!
//! No image is wider or taller than [`MAX_SIDE`] pixels. A grid that would be is laid
//! out in fewer columns of panels and, where that is not enough, its panels are
//! downsampled: k neighbouring rows (or columns) become one, the mean of the k (the
//! mean of the finite ones where some are −∞), and the panel says so under its title
//! (`frames: 1500 → 375, mean of 4`, named by [`Panel::units`]).
//!
//! Text is drawn with DejaVu Sans, compiled into the binary (crate `dejavu`) and given to
//! plotters' pure-Rust `ab_glyph` renderer: no fontconfig or freetype at build time, no
//! font file needed at run time.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

use ab_glyph::{point, Font, FontRef, PxScale, ScaleFont};

use crate::tensor::Tensor;
use crate::{Error, Result};

/// How values map to colours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColorMap {
    /// White → dark blue: probabilities, masks (0 = white).
    Blues,
    /// Dark purple → green → yellow (viridis-like): any sequential quantity.
    Viridis,
    /// Blue → white → red, centred on 0: signed values such as position encodings.
    Diverging,
}

impl ColorMap {
    /// The colour of t in [0, 1] (clamped).
    pub fn color(self, t: f64) -> RGBColor {
        let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
        let stops: &[(u8, u8, u8)] = match self {
            ColorMap::Blues => &[
                (247, 251, 255),
                (198, 219, 239),
                (107, 174, 214),
                (33, 113, 181),
                (8, 48, 107),
            ],
            ColorMap::Viridis => &[
                (68, 1, 84),
                (59, 82, 139),
                (33, 145, 140),
                (94, 201, 98),
                (253, 231, 37),
            ],
            ColorMap::Diverging => &[
                (59, 76, 192),
                (141, 176, 254),
                (242, 242, 242),
                (244, 154, 123),
                (180, 4, 38),
            ],
        };
        let x = t * (stops.len() - 1) as f64;
        let k = (x.floor() as usize).min(stops.len() - 2);
        let f = x - k as f64;
        let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * f).round() as u8;
        let (a, b) = (stops[k], stops[k + 1]);
        RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
    }
}

/// One heatmap: a matrix with a title, labels and a colour map.
#[derive(Clone, Debug)]
pub struct Panel {
    /// Shown above the matrix.
    pub title: String,
    /// rows × cols values (every row the same length).
    pub matrix: Vec<Vec<f32>>,
    /// One label per row (e.g. query tokens), or empty for indices.
    pub row_labels: Vec<String>,
    /// One label per column (e.g. key tokens), or empty for indices.
    pub col_labels: Vec<String>,
    /// Name of the x axis (columns), e.g. "key" or "position".
    pub x_label: Option<String>,
    /// Name of the y axis (rows), e.g. "query" or "dimension".
    pub y_label: Option<String>,
    /// The colour map.
    pub colormap: ColorMap,
    /// The value range of the colours; None = the matrix's min and max (symmetric about
    /// 0 for [`ColorMap::Diverging`]).
    pub range: Option<(f32, f32)>,
    /// Write each value in its cell (only drawn where the cells are big enough).
    pub annotate: bool,
    /// What one row and one column are (`tokens`, `frames`), for the note a
    /// downsampled panel carries; default `rows`, `columns`.
    pub units: (String, String),
    /// A line under the title (what downsampling did, written by [`Panel::pool`]).
    pub note: Option<String>,
}

impl Panel {
    /// A panel with the `Blues` map, index labels, no annotation.
    pub fn new(title: impl Into<String>, matrix: Vec<Vec<f32>>) -> Panel {
        Panel {
            title: title.into(),
            matrix,
            row_labels: Vec::new(),
            col_labels: Vec::new(),
            x_label: None,
            y_label: None,
            colormap: ColorMap::Blues,
            range: None,
            annotate: false,
            units: ("rows".into(), "columns".into()),
            note: None,
        }
    }

    /// A panel from a 2-D tensor.
    ///
    /// # Shapes
    /// m: (rows, cols)
    pub fn from_tensor(title: impl Into<String>, m: &Tensor) -> Result<Panel> {
        let [_r, _c] = m.dims()?;
        Ok(Panel::new(title, m.to_rows()))
    }

    /// Set row and column labels (e.g. the tokens).
    pub fn labels(mut self, rows: Vec<String>, cols: Vec<String>) -> Panel {
        self.row_labels = rows;
        self.col_labels = cols;
        self
    }

    /// Name the axes.
    pub fn axes(mut self, x: impl Into<String>, y: impl Into<String>) -> Panel {
        self.x_label = Some(x.into());
        self.y_label = Some(y.into());
        self
    }

    /// Choose the colour map.
    pub fn colormap(mut self, c: ColorMap) -> Panel {
        self.colormap = c;
        self
    }

    /// Fix the colour range.
    pub fn range(mut self, lo: f32, hi: f32) -> Panel {
        self.range = Some((lo, hi));
        self
    }

    /// Write the values in the cells.
    pub fn annotate(mut self, yes: bool) -> Panel {
        self.annotate = yes;
        self
    }

    /// Name what one row and one column are (`tokens`, `frames`): the note of a
    /// downsampled panel says `frames: 1500 → 375, mean of 4`.
    pub fn units(mut self, rows: impl Into<String>, cols: impl Into<String>) -> Panel {
        self.units = (rows.into(), cols.into());
        self
    }

    /// Downsample: every `ky` neighbouring rows and every `kx` neighbouring columns
    /// become one cell, the mean of the finite values among them (−∞ where all are −∞;
    /// the last bin of an axis may hold fewer). A bin's label is the first non-empty
    /// label of its rows or columns (the first index where there are no labels). The
    /// note under the title says what was pooled, e.g. `frames: 1500 → 375, mean of 4`.
    ///
    /// # Shapes
    /// matrix: (r, c) → (⌈r / ky⌉, ⌈c / kx⌉)
    pub fn pool(mut self, ky: usize, kx: usize) -> Panel {
        let (ky, kx) = (ky.max(1), kx.max(1));
        let (r, c) = self.dims();
        if (ky == 1 && kx == 1) || r == 0 || c == 0 {
            return self;
        }
        let (r2, c2) = (r.div_ceil(ky), c.div_ceil(kx));
        let mut out = vec![vec![0f32; c2]; r2]; // (r2, c2)
        for (bi, out_row) in out.iter_mut().enumerate() {
            let rows = &self.matrix[bi * ky..((bi + 1) * ky).min(r)];
            for (bj, cell) in out_row.iter_mut().enumerate() {
                let (j0, j1) = (bj * kx, ((bj + 1) * kx).min(c));
                let (mut sum, mut n) = (0f64, 0usize);
                for row in rows {
                    for &v in &row[j0..j1] {
                        if v.is_finite() {
                            sum += f64::from(v);
                            n += 1;
                        }
                    }
                }
                *cell = if n > 0 {
                    (sum / n as f64) as f32
                } else {
                    f32::NEG_INFINITY
                };
            }
        }
        let pool_labels = |labels: &[String], k: usize, n: usize| -> Vec<String> {
            (0..n.div_ceil(k))
                .map(|b| {
                    if labels.is_empty() {
                        return (b * k).to_string();
                    }
                    labels[b * k..((b + 1) * k).min(n)]
                        .iter()
                        .find(|l| !l.is_empty())
                        .cloned()
                        .unwrap_or_default()
                })
                .collect()
        };
        self.note = self.pool_note(ky, kx);
        if ky > 1 {
            self.row_labels = pool_labels(&self.row_labels, ky, r);
        }
        if kx > 1 {
            self.col_labels = pool_labels(&self.col_labels, kx, c);
        }
        self.matrix = out;
        self
    }

    /// The note [`Panel::pool`]`(ky, kx)` leaves (after the panel's own note, if any).
    fn pool_note(&self, ky: usize, kx: usize) -> Option<String> {
        let (r, c) = self.dims();
        let mut notes: Vec<String> = self.note.iter().cloned().collect();
        if ky > 1 {
            notes.push(format!(
                "{}: {r} → {}, mean of {ky}",
                self.units.0,
                r.div_ceil(ky)
            ));
        }
        if kx > 1 {
            notes.push(format!(
                "{}: {c} → {}, mean of {kx}",
                self.units.1,
                c.div_ceil(kx)
            ));
        }
        (!notes.is_empty()).then(|| notes.join("; "))
    }

    fn dims(&self) -> (usize, usize) {
        (self.matrix.len(), self.matrix.first().map_or(0, Vec::len))
    }

    fn check(&self) -> Result<()> {
        let (r, c) = self.dims();
        if r == 0 || c == 0 {
            return Err(Error::Argument(format!(
                "heatmap '{}': the matrix is empty",
                self.title
            )));
        }
        if self.matrix.iter().any(|row| row.len() != c) {
            return Err(Error::Argument(format!(
                "heatmap '{}': rows have different lengths",
                self.title
            )));
        }
        if !self.row_labels.is_empty() && self.row_labels.len() != r {
            return Err(Error::Argument(format!(
                "heatmap '{}': {} row labels for {r} rows",
                self.title,
                self.row_labels.len()
            )));
        }
        if !self.col_labels.is_empty() && self.col_labels.len() != c {
            return Err(Error::Argument(format!(
                "heatmap '{}': {} column labels for {c} columns",
                self.title,
                self.col_labels.len()
            )));
        }
        Ok(())
    }

    /// The colour range [lo, hi] actually used.
    pub fn value_range(&self) -> (f32, f32) {
        if let Some(r) = self.range {
            return r;
        }
        let vals = self
            .matrix
            .iter()
            .flatten()
            .copied()
            .filter(|v| v.is_finite());
        let (lo, hi) = vals.fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
        if !lo.is_finite() {
            return (0.0, 1.0);
        }
        if self.colormap == ColorMap::Diverging {
            let m = lo.abs().max(hi.abs()).max(f32::MIN_POSITIVE);
            return (-m, m);
        }
        if hi > lo {
            (lo, hi)
        } else {
            (lo - 0.5, lo + 0.5)
        }
    }
}

/// The most pixels any image drawn here has on a side, width or height: a grid that
/// would be larger is laid out in fewer columns, then its panels are downsampled
/// ([`Panel::pool`]) until it fits.
pub const MAX_SIDE: usize = 4000;

/// What a drawing wrote: the image's size and the notes of the panels it downsampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drawn {
    /// Width in pixels (at most [`MAX_SIDE`]).
    pub width: u32,
    /// Height in pixels (at most [`MAX_SIDE`]).
    pub height: u32,
    /// Each distinct note of a downsampled panel (`frames: 1500 → 375, mean of 4`);
    /// empty when every panel is drawn cell for cell.
    pub notes: Vec<String>,
}

/// Draw one panel to `path` (.png or .svg).
pub fn heatmap(panel: &Panel, path: &Path) -> Result<Drawn> {
    heatmap_grid_with(panels_ref(panel), 1, None, path)
}

fn panels_ref(p: &Panel) -> &[Panel] {
    std::slice::from_ref(p)
}

/// Draw several panels side by side in one image (up to 4 per row), e.g. the three
/// classic masks or one panel per attention head.
pub fn heatmap_grid(panels: &[Panel], path: &Path) -> Result<Drawn> {
    heatmap_grid_with(panels, panels.len().clamp(1, 4), None, path)
}

/// [`heatmap_grid`] with a chosen number of columns (at most; fewer where the image
/// would be wider than [`MAX_SIDE`]) and an optional overall title.
pub fn heatmap_grid_with(
    panels: &[Panel],
    columns: usize,
    title: Option<&str>,
    path: &Path,
) -> Result<Drawn> {
    if panels.is_empty() {
        return Err(Error::Argument("heatmap grid: no panels to draw".into()));
    }
    for p in panels {
        p.check()?;
    }
    register_fonts()?;
    let title_h = if title.is_some() { 40 } else { 0 };
    let (panels, columns) = fit(panels, columns.clamp(1, panels.len()), title_h)?;
    let panels = &panels[..];
    let rows = panels.len().div_ceil(columns);
    let layouts: Vec<Layout> = panels.iter().map(Layout::of).collect();
    let (pw, ph) = layouts
        .iter()
        .fold((0, 0), |(w, h), l| (w.max(l.width), h.max(l.height)));
    let size = ((pw * columns) as u32, (ph * rows + title_h) as u32);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let draw_err = |e: String| Error::format(path, format!("could not draw the plot: {e}"));
    match ext.as_deref() {
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw_all(&root, panels, &layouts, columns, (pw, ph), title, true).map_err(draw_err)?;
            root.present().map_err(|e| draw_err(e.to_string()))?;
        }
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw_all(&root, panels, &layouts, columns, (pw, ph), title, false).map_err(draw_err)?;
            root.present().map_err(|e| draw_err(e.to_string()))?;
        }
        _ => {
            return Err(Error::Argument(format!(
                "plot file {} must end in .png or .svg",
                path.display()
            )))
        }
    }
    let mut notes: Vec<String> = Vec::new();
    for n in panels.iter().filter_map(|p| p.note.clone()) {
        if !notes.contains(&n) {
            notes.push(n);
        }
    }
    Ok(Drawn {
        width: size.0,
        height: size.1,
        notes,
    })
}

/// The grid's panels and columns within [`MAX_SIDE`]: for each number of columns up
/// to `columns`, the least pooling (k rows × k columns per cell) that fits; the
/// choice loses the fewest cells, and of equals keeps the most columns. Panels that
/// fit as they are come back unchanged.
fn fit(panels: &[Panel], columns: usize, title_h: usize) -> Result<(Vec<Panel>, usize)> {
    let n = panels.len();
    let (max_r, max_c) = panels
        .iter()
        .map(Panel::dims)
        .fold((1, 1), |(a, b), (r, c)| (a.max(r), b.max(c)));
    // The grid's size with every panel pooled by (ky, kx), estimated from the original
    // labels (pooling keeps a subset of them, so the estimate is an upper bound).
    let widths: Vec<(usize, usize)> = panels.iter().map(label_widths).collect();
    let size = |ky: usize, kx: usize| -> (usize, usize) {
        panels.iter().zip(&widths).fold((0, 0), |(w, h), (p, &lw)| {
            let (r, c) = p.dims();
            let note = p.pool_note(ky, kx);
            let l = Layout::sized(p, r.div_ceil(ky), c.div_ceil(kx), note.as_deref(), lw);
            (w.max(l.width), h.max(l.height))
        })
    };
    let mut best: Option<(usize, usize, usize, usize)> = None; // (loss, columns, ky, kx)
    for c in (1..=columns).rev() {
        let rows = n.div_ceil(c);
        let max_w = MAX_SIDE / c;
        let max_h = MAX_SIDE.saturating_sub(title_h) / rows;
        let (mut ky, mut kx) = (1, 1);
        let found = loop {
            let (w, h) = size(ky, kx);
            if w <= max_w && h <= max_h {
                break true;
            }
            let (grow_x, grow_y) = (w > max_w && kx < max_c, h > max_h && ky < max_r);
            if !grow_x && !grow_y {
                break false;
            }
            kx += usize::from(grow_x);
            ky += usize::from(grow_y);
        };
        if found && best.is_none_or(|b| ky * kx < b.0) {
            best = Some((ky * kx, c, ky, kx));
        }
    }
    let Some((_, c, mut ky, mut kx)) = best else {
        return Err(Error::Argument(format!(
            "heatmap grid: {n} panels do not fit in {MAX_SIDE} × {MAX_SIDE} pixels; draw fewer at once"
        )));
    };
    // Check the real layouts (the estimate is an upper bound; this loop rarely turns).
    loop {
        let pooled: Vec<Panel> = panels.iter().map(|p| p.clone().pool(ky, kx)).collect();
        let (w, h) = pooled
            .iter()
            .map(Layout::of)
            .fold((0, 0), |(w, h), l| (w.max(l.width), h.max(l.height)));
        let rows = n.div_ceil(c);
        let (fits_w, fits_h) = (w * c <= MAX_SIDE, h * rows + title_h <= MAX_SIDE);
        if (fits_w && fits_h) || (kx >= max_c && ky >= max_r) {
            return Ok((pooled, c));
        }
        kx = (kx + usize::from(!fits_w)).min(max_c);
        ky = (ky + usize::from(!fits_h)).min(max_r);
    }
}

pub(crate) fn register_fonts() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_ok()
            && plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold())
                .is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Argument(
            "the built-in DejaVu Sans font could not be read".into(),
        ))
    }
}

/// Pixel geometry of one panel.
struct Layout {
    width: usize,
    height: usize,
    cell_w: usize,
    cell_h: usize,
    left: usize,
    top: usize,
    font: f64,
    rotate_cols: bool,
}

const BAR_W: usize = 16;
const BAR_GAP: usize = 14;
const BAR_LABELS: usize = 64;
const PAD: usize = 14;
/// Height and font size of the note line under a panel's title.
const NOTE_H: usize = 18;
const NOTE_FONT: f64 = 12.0;
/// Font size of row and column labels.
const LABEL_FONT: f64 = 13.0;

impl Layout {
    fn of(p: &Panel) -> Layout {
        let (r, c) = p.dims();
        Layout::sized(p, r, c, p.note.as_deref(), label_widths(p))
    }

    /// The layout of `p` drawn as r × c cells (its own size, or a pooled size) with
    /// `note` under the title and labels as wide as `(row_w, col_w)` ([`label_widths`];
    /// a pooled panel keeps a subset of its labels, so measured on the unpooled panel
    /// they bound the pooled one's).
    fn sized(
        p: &Panel,
        r: usize,
        c: usize,
        note: Option<&str>,
        (row_w, col_w): (usize, usize),
    ) -> Layout {
        let cell = (560 / r.max(c).max(1)).clamp(4, 64);
        let font = LABEL_FONT;
        let rotate_cols = col_w + 4 > cell * label_step(c, cell, font);
        let col_h = if rotate_cols {
            col_w + 6
        } else {
            font as usize + 6
        };
        let y_axis = if p.y_label.is_some() { 26 } else { 0 };
        let x_axis = if p.x_label.is_some() { 20 } else { 0 };
        let left = PAD + y_axis + row_w + 6;
        let top = PAD + 26 + if note.is_some() { NOTE_H } else { 0 };
        let note_w = note.map_or(0, |n| text_w(n, NOTE_FONT) + 2 * PAD);
        let title_w = (text_w(&p.title, 15.0) + 2 * PAD).max(note_w);
        let body_w = left + cell * c + BAR_GAP + BAR_W + BAR_LABELS;
        let width = body_w.max(title_w);
        let height = top + cell * r + 6 + col_h + x_axis + PAD;
        Layout {
            width,
            height,
            cell_w: cell,
            cell_h: cell,
            left,
            top,
            font,
            rotate_cols,
        }
    }
}

/// The widest row label and the widest column label in pixels (at most 140).
fn label_widths(p: &Panel) -> (usize, usize) {
    let (r, c) = p.dims();
    let widest = |given: &[String], n: usize| {
        label_texts(given, n)
            .iter()
            .map(|s| text_w(s, LABEL_FONT))
            .max()
            .unwrap_or(0)
            .min(140)
    };
    (widest(&p.row_labels, r), widest(&p.col_labels, c))
}

/// The labels to print: the given ones, or indices.
fn label_texts(given: &[String], n: usize) -> Vec<String> {
    if given.is_empty() {
        (0..n).map(|i| i.to_string()).collect()
    } else {
        given.to_vec()
    }
}

/// Print every k-th label so that labels do not overlap.
fn label_step(n: usize, cell: usize, font: f64) -> usize {
    let need = font as usize + 2;
    let step = need.div_ceil(cell.max(1)).max(1);
    if step == 1 || n <= 1 {
        return 1;
    }
    // round up to a friendly step
    [2, 5, 10, 20, 25, 50, 100, 200, 500, 1000]
        .into_iter()
        .find(|&s| s >= step)
        .unwrap_or(step)
}

type DrawResult = std::result::Result<(), String>;

fn draw_all<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panels: &[Panel],
    layouts: &[Layout],
    columns: usize,
    (pw, ph): (usize, usize),
    title: Option<&str>,
    bitmap: bool,
) -> DrawResult {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut y0 = 0;
    if let Some(t) = title {
        text(
            root,
            t,
            ((root.dim_in_pixel().0 / 2) as i32, 20),
            18.0,
            HPos::Center,
            Dir::Right,
            true,
            bitmap,
            &BLACK,
        )?;
        y0 = 40;
    }
    for (k, (p, l)) in panels.iter().zip(layouts).enumerate() {
        let (gx, gy) = (k % columns, k / columns);
        let origin = ((gx * pw) as i32, (y0 + gy * ph) as i32);
        draw_panel(root, p, l, origin, bitmap)?;
    }
    Ok(())
}

/// Which way a line of text runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// Left to right.
    Right,
    /// Top to bottom (turned 90° clockwise).
    Down,
    /// Bottom to top (turned 90° counter-clockwise), for a y-axis name.
    Up,
}

struct Fonts {
    regular: FontRef<'static>,
    bold: FontRef<'static>,
}

fn fonts() -> Option<&'static Fonts> {
    static FONTS: OnceLock<Option<Fonts>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            Some(Fonts {
                regular: FontRef::try_from_slice(dejavu::sans::regular()).ok()?,
                bold: FontRef::try_from_slice(dejavu::sans::bold()).ok()?,
            })
        })
        .as_ref()
}

/// Width in pixels of `s` at font size `size`.
fn text_w(s: &str, size: f64) -> usize {
    let Some(f) = fonts() else {
        return (s.chars().count() as f64 * size * 0.6).ceil() as usize;
    };
    let sf = f.regular.as_scaled(PxScale::from(size as f32));
    let mut w = 0f32;
    let mut prev = None;
    for c in s.chars() {
        let id = sf.glyph_id(c);
        if let Some(p) = prev {
            w += sf.kern(p, id);
        }
        w += sf.h_advance(id);
        prev = Some(id);
    }
    w.ceil() as usize
}

/// One line of text, centred across its direction of travel on (x, y); `h` anchors it
/// along that direction. Bitmaps are rasterised here with ab_glyph (kerning and side
/// bearings right); SVG gets a `<text>` element.
#[allow(clippy::too_many_arguments)]
fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: &str,
    (x, y): (i32, i32),
    size: f64,
    h: HPos,
    dir: Dir,
    bold: bool,
    bitmap: bool,
    color: &RGBColor,
) -> DrawResult {
    let fonts = match fonts() {
        Some(f) if bitmap => f,
        _ => {
            // plotters' SVG writes font-size = size / 1.24; undo that so SVG matches PNG
            let font = ("sans-serif", size * 1.24).into_font();
            let font = if bold {
                font.style(FontStyle::Bold)
            } else {
                font
            };
            let font = match dir {
                Dir::Right => font,
                Dir::Down => font.transform(FontTransform::Rotate90),
                Dir::Up => font.transform(FontTransform::Rotate270),
            };
            let style = font.color(color).pos(Pos::new(h, VPos::Center));
            return area
                .draw(&Text::new(s.to_string(), (x, y), style))
                .map_err(|e| e.to_string());
        }
    };
    let font = if bold { &fonts.bold } else { &fonts.regular };
    let scale = PxScale::from(size as f32);
    let sf = font.as_scaled(scale);
    let mut caret = 0f32;
    let mut prev = None;
    let mut glyphs = Vec::with_capacity(s.len());
    for c in s.chars() {
        let id = sf.glyph_id(c);
        if let Some(p) = prev {
            caret += sf.kern(p, id);
        }
        glyphs.push(id.with_scale_and_position(scale, point(caret, 0.0)));
        caret += sf.h_advance(id);
        prev = Some(id);
    }
    let u0 = match h {
        HPos::Left => 0.0,
        HPos::Center => -caret / 2.0,
        HPos::Right => -caret,
    };
    let baseline = 0.36 * size as f32; // DejaVu's cap height is about 0.73 em
    let mut pixels = Vec::new();
    for g in glyphs {
        if let Some(og) = font.outline_glyph(g) {
            let b = og.px_bounds();
            og.draw(|gx, gy, cov| {
                let u = u0 + b.min.x + gx as f32;
                let v = baseline + b.min.y + gy as f32;
                let (px, py) = match dir {
                    Dir::Right => (x as f32 + u, y as f32 + v),
                    Dir::Down => (x as f32 - v, y as f32 + u),
                    Dir::Up => (x as f32 + v, y as f32 - u),
                };
                if cov > 0.02 {
                    pixels.push(((px.round() as i32, py.round() as i32), cov.min(1.0)));
                }
            });
        }
    }
    for (p, cov) in pixels {
        area.draw_pixel(p, &color.mix(cov as f64))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    p: &Panel,
    l: &Layout,
    (ox, oy): (i32, i32),
    bitmap: bool,
) -> DrawResult {
    let (r, c) = p.dims();
    let (lo, hi) = p.value_range();
    let span = hi - lo;
    let (cw, ch) = (l.cell_w as i32, l.cell_h as i32);
    let x0 = ox + l.left as i32;
    let y0 = oy + l.top as i32;
    let font = l.font;
    let grey = RGBColor(60, 60, 60);

    // title
    let tx = ox + (l.width as i32) / 2;
    text(
        root,
        &p.title,
        (tx, oy + PAD as i32 + 4),
        15.0,
        HPos::Center,
        Dir::Right,
        true,
        bitmap,
        &BLACK,
    )?;
    if let Some(note) = &p.note {
        text(
            root,
            note,
            (tx, oy + PAD as i32 + 4 + NOTE_H as i32),
            NOTE_FONT,
            HPos::Center,
            Dir::Right,
            false,
            bitmap,
            &grey,
        )?;
    }

    // cells
    for (i, row) in p.matrix.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            let col = cell_color(p.colormap, v, lo, span);
            let (cx, cy) = (x0 + j as i32 * cw, y0 + i as i32 * ch);
            root.draw(&Rectangle::new(
                [(cx, cy), (cx + cw, cy + ch)],
                col.filled(),
            ))
            .map_err(|e| e.to_string())?;
        }
    }
    // thin grid lines between cells when they are big
    if l.cell_w >= 16 {
        let line = RGBColor(255, 255, 255).stroke_width(1);
        for j in 0..=c as i32 {
            root.draw(&PathElement::new(
                vec![(x0 + j * cw, y0), (x0 + j * cw, y0 + r as i32 * ch)],
                line,
            ))
            .map_err(|e| e.to_string())?;
        }
        for i in 0..=r as i32 {
            root.draw(&PathElement::new(
                vec![(x0, y0 + i * ch), (x0 + c as i32 * cw, y0 + i * ch)],
                line,
            ))
            .map_err(|e| e.to_string())?;
        }
    }
    // values in the cells
    let cell_font = (l.cell_h as f64 * 0.3).min(13.0);
    if p.annotate && l.cell_w >= 36 && l.cell_h >= 22 {
        for (i, row) in p.matrix.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                let bg = cell_color(p.colormap, v, lo, span);
                let lum = 0.299 * bg.0 as f64 + 0.587 * bg.1 as f64 + 0.114 * bg.2 as f64;
                let fg = if lum < 128.0 { WHITE } else { BLACK };
                let s = fmt_value(v);
                let (cx, cy) = (x0 + j as i32 * cw + cw / 2, y0 + i as i32 * ch + ch / 2);
                text(
                    root,
                    &s,
                    (cx, cy),
                    cell_font,
                    HPos::Center,
                    Dir::Right,
                    false,
                    bitmap,
                    &fg,
                )?;
            }
        }
    }

    // row labels
    let rows = label_texts(&p.row_labels, r);
    let rstep = label_step(r, l.cell_h, font);
    for (i, s) in rows.iter().enumerate().filter(|(i, _)| i % rstep == 0) {
        let s = shorten(s, 18);
        text(
            root,
            &s,
            (x0 - 6, y0 + i as i32 * ch + ch / 2),
            font,
            HPos::Right,
            Dir::Right,
            false,
            bitmap,
            &grey,
        )?;
    }
    // column labels
    let cols = label_texts(&p.col_labels, c);
    let ybot = y0 + r as i32 * ch + 6;
    let cstep = if l.rotate_cols {
        label_step(c, l.cell_w, font)
    } else {
        label_step_w(&cols, l.cell_w, font)
    };
    for (j, s) in cols.iter().enumerate().filter(|(j, _)| j % cstep == 0) {
        let s = shorten(s, 18);
        let cx = x0 + j as i32 * cw + cw / 2;
        if l.rotate_cols {
            text(
                root,
                &s,
                (cx, ybot),
                font,
                HPos::Left,
                Dir::Down,
                false,
                bitmap,
                &grey,
            )?;
        } else {
            text(
                root,
                &s,
                (cx, ybot + font as i32 / 2 + 2),
                font,
                HPos::Center,
                Dir::Right,
                false,
                bitmap,
                &grey,
            )?;
        }
    }
    // axis names
    let col_block = if l.rotate_cols {
        cols.iter()
            .map(|s| text_w(&shorten(s, 18), font))
            .max()
            .unwrap_or(0)
            + 6
    } else {
        font as usize + 6
    };
    if let Some(x) = &p.x_label {
        let y = ybot + col_block as i32 + 8;
        text(
            root,
            x,
            (x0 + c as i32 * cw / 2, y),
            font,
            HPos::Center,
            Dir::Right,
            false,
            bitmap,
            &BLACK,
        )?;
    }
    if let Some(yl) = &p.y_label {
        let x = ox + PAD as i32 + 6;
        text(
            root,
            yl,
            (x, y0 + r as i32 * ch / 2),
            font,
            HPos::Center,
            Dir::Up,
            false,
            bitmap,
            &BLACK,
        )?;
    }

    // colour bar
    let bx = x0 + c as i32 * cw + BAR_GAP as i32;
    let bh = (r as i32 * ch).max(60);
    let steps = bh.max(1);
    for s in 0..steps {
        let t = 1.0 - s as f64 / (steps - 1).max(1) as f64;
        root.draw(&Rectangle::new(
            [(bx, y0 + s), (bx + BAR_W as i32, y0 + s + 1)],
            p.colormap.color(t).filled(),
        ))
        .map_err(|e| e.to_string())?;
    }
    root.draw(&Rectangle::new(
        [(bx, y0), (bx + BAR_W as i32, y0 + bh)],
        grey.stroke_width(1),
    ))
    .map_err(|e| e.to_string())?;
    let tick_font = 11.0;
    for (k, v) in [(0, hi), (1, (lo + hi) / 2.0), (2, lo)] {
        let y = y0 + k * (bh - 1) / 2;
        root.draw(&PathElement::new(
            vec![(bx + BAR_W as i32, y), (bx + BAR_W as i32 + 3, y)],
            grey.stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
        text(
            root,
            &fmt_value(v),
            (bx + BAR_W as i32 + 5, y),
            tick_font,
            HPos::Left,
            Dir::Right,
            false,
            bitmap,
            &grey,
        )?;
    }
    Ok(())
}

/// The colour of one cell; −∞ (a masked score) is light grey, whatever the map.
fn cell_color(c: ColorMap, v: f32, lo: f32, span: f32) -> RGBColor {
    if v == f32::NEG_INFINITY {
        return MASKED;
    }
    let t = if v.is_finite() {
        (v - lo) as f64 / span as f64
    } else {
        1.0
    };
    c.color(t)
}

/// The colour of a masked (−∞) cell.
pub const MASKED: RGBColor = RGBColor(215, 215, 215);

/// Step for horizontal column labels: wide enough that neighbours do not overlap.
fn label_step_w(labels: &[String], cell: usize, font: f64) -> usize {
    let w = labels
        .iter()
        .map(|s| text_w(&shorten(s, 18), font))
        .max()
        .unwrap_or(0)
        + 6;
    let step = w.div_ceil(cell.max(1)).max(1);
    if step == 1 {
        1
    } else {
        [2, 5, 10, 20, 25, 50, 100, 200, 500, 1000]
            .into_iter()
            .find(|&s| s >= step)
            .unwrap_or(step)
    }
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// A value as a short label: 0.39, −1.6, 1e-05, −∞.
pub fn fmt_value(v: f32) -> String {
    if v == f32::NEG_INFINITY {
        return "−∞".into();
    }
    if v == f32::INFINITY {
        return "∞".into();
    }
    let a = v.abs();
    let s = if a == 0.0 {
        "0".to_string()
    } else if !(0.001..1000.0).contains(&a) {
        format!("{v:.0e}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    s.replace('-', "−")
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn tmp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("lucent-viz-{}-{name}", std::process::id()))
    }

    #[test]
    fn colormaps_hit_their_ends() {
        assert_eq!(ColorMap::Blues.color(0.0), RGBColor(247, 251, 255));
        assert_eq!(ColorMap::Blues.color(1.0), RGBColor(8, 48, 107));
        assert_eq!(ColorMap::Diverging.color(0.5), RGBColor(242, 242, 242));
        assert_eq!(ColorMap::Viridis.color(2.0), ColorMap::Viridis.color(1.0));
    }

    #[test]
    fn ranges() {
        let p = Panel::new("x", vec![vec![-1.0, 3.0]]);
        assert_eq!(p.value_range(), (-1.0, 3.0));
        assert_eq!(
            p.clone().colormap(ColorMap::Diverging).value_range(),
            (-3.0, 3.0)
        );
        assert_eq!(Panel::new("c", vec![vec![2.0]]).value_range(), (1.5, 2.5));
        assert_eq!(p.range(0.0, 1.0).value_range(), (0.0, 1.0));
    }

    #[test]
    fn writes_png_and_svg_grid() -> TestResult {
        let a = Panel::new("weights", vec![vec![0.2, 0.8], vec![0.5, 0.5]])
            .labels(
                vec!["The".into(), "cat".into()],
                vec!["The".into(), "cat".into()],
            )
            .axes("key", "query")
            .annotate(true);
        let b = Panel::new(
            "big",
            (0..40)
                .map(|i| (0..70).map(|j| ((i * j) as f32).sin()).collect())
                .collect(),
        )
        .colormap(ColorMap::Diverging);
        for ext in ["png", "svg"] {
            let path = tmp(&format!("grid.{ext}"));
            heatmap_grid(&[a.clone(), b.clone()], &path)?;
            let bytes = std::fs::read(&path)?;
            assert!(bytes.len() > 1000, "{ext}: {} bytes", bytes.len());
            if ext == "png" {
                assert_eq!(&bytes[1..4], b"PNG");
            } else {
                assert!(String::from_utf8_lossy(&bytes).contains("weights"));
            }
            std::fs::remove_file(&path)?;
        }
        Ok(())
    }

    #[test]
    fn pool_takes_means_and_says_so() {
        let p = Panel::new(
            "p",
            vec![
                vec![1.0, 3.0, 5.0, 7.0, 9.0],
                vec![3.0, f32::NEG_INFINITY, 7.0, 9.0, 11.0],
            ],
        )
        .labels(
            vec!["a".into(), "b".into()],
            vec![
                "0.0s".into(),
                String::new(),
                String::new(),
                "0.1s".into(),
                String::new(),
            ],
        )
        .units("tokens", "frames")
        .pool(1, 2);
        // Bins of 2 columns (the last of 1); −∞ left out of the mean.
        assert_eq!(p.matrix, vec![vec![2.0, 6.0, 9.0], vec![3.0, 8.0, 11.0]]);
        assert_eq!(p.col_labels, vec!["0.0s", "0.1s", ""]);
        assert_eq!(p.row_labels, vec!["a", "b"]);
        assert_eq!(p.note.as_deref(), Some("frames: 5 → 3, mean of 2"));
        let both = Panel::new("q", vec![vec![1.0; 4]; 4]).pool(2, 4);
        assert_eq!(both.matrix, vec![vec![1.0], vec![1.0]]);
        assert_eq!(both.row_labels, vec!["0", "2"]);
        assert_eq!(
            both.note.as_deref(),
            Some("rows: 4 → 2, mean of 2; columns: 4 → 1, mean of 4")
        );
        let same = Panel::new("r", vec![vec![1.0]]).pool(1, 1);
        assert_eq!(same.note, None);
    }

    #[test]
    fn big_grids_stay_within_max_side() -> TestResult {
        // Six heads of 1500 × 1500 (Whisper's encoder) and four of 20 × 1500 (its cross).
        let square: Vec<Panel> = (0..6)
            .map(|h| {
                Panel::new(
                    format!("head {h}"),
                    (0..1500)
                        .map(|i| (0..1500).map(|j| ((i + j + h) % 7) as f32).collect())
                        .collect(),
                )
                .units("query frames", "key frames")
            })
            .collect();
        let wide: Vec<Panel> = (0..4)
            .map(|l| {
                Panel::new(
                    format!("layer {l}"),
                    (0..20)
                        .map(|i| (0..1500).map(|j| ((i * j) % 5) as f32).collect())
                        .collect(),
                )
                .units("tokens", "frames")
            })
            .collect();
        for (name, panels) in [("square", &square), ("wide", &wide)] {
            let path = tmp(&format!("{name}.png"));
            let d = heatmap_grid(panels, &path)?;
            assert!(
                d.width as usize <= MAX_SIDE && d.height as usize <= MAX_SIDE,
                "{name}: {d:?}"
            );
            let b = std::fs::read(&path)?;
            let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
            assert_eq!((be(16), be(20)), (d.width, d.height), "{name}");
            assert_eq!(d.notes.len(), 1, "{name}: {:?}", d.notes);
            std::fs::remove_file(&path)?;
            // The note is on the picture.
            let svg = tmp(&format!("{name}.svg"));
            let d = heatmap_grid(panels, &svg)?;
            assert!(std::fs::read_to_string(&svg)?.contains(&d.notes[0]));
            std::fs::remove_file(&svg)?;
        }
        let d = heatmap_grid(&wide, &tmp("wide-notes.svg"))?;
        assert!(d.notes[0].starts_with("frames: 1500 → "), "{:?}", d.notes);
        // A small grid is drawn cell for cell, without a note.
        let small = Panel::new("s", vec![vec![0.5; 12]; 12]);
        let d = heatmap_grid(&[small.clone(), small], &tmp("small.png"))?;
        assert!(d.notes.is_empty());
        Ok(())
    }

    #[test]
    fn errors() {
        let path = tmp("bad.jpg");
        assert!(heatmap(&Panel::new("x", vec![vec![1.0]]), &path).is_err());
        assert!(heatmap(&Panel::new("x", vec![]), &tmp("e.png")).is_err());
        assert!(heatmap(
            &Panel::new("x", vec![vec![1.0], vec![1.0, 2.0]]),
            &tmp("r.png")
        )
        .is_err());
        let lab = Panel::new("x", vec![vec![1.0]]).labels(vec!["a".into(), "b".into()], vec![]);
        assert!(heatmap(&lab, &tmp("l.png")).is_err());
        assert!(heatmap_grid(&[], &tmp("n.png")).is_err());
    }
}
