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

/// Draw one panel to `path` (.png or .svg).
pub fn heatmap(panel: &Panel, path: &Path) -> Result<()> {
    heatmap_grid_with(panels_ref(panel), 1, None, path)
}

fn panels_ref(p: &Panel) -> &[Panel] {
    std::slice::from_ref(p)
}

/// Draw several panels side by side in one image (up to 4 per row), e.g. the three
/// classic masks or one panel per attention head.
pub fn heatmap_grid(panels: &[Panel], path: &Path) -> Result<()> {
    heatmap_grid_with(panels, panels.len().clamp(1, 4), None, path)
}

/// [`heatmap_grid`] with a chosen number of columns and an optional overall title.
pub fn heatmap_grid_with(
    panels: &[Panel],
    columns: usize,
    title: Option<&str>,
    path: &Path,
) -> Result<()> {
    if panels.is_empty() {
        return Err(Error::Argument("heatmap grid: no panels to draw".into()));
    }
    for p in panels {
        p.check()?;
    }
    register_fonts()?;
    let columns = columns.clamp(1, panels.len());
    let rows = panels.len().div_ceil(columns);
    let layouts: Vec<Layout> = panels.iter().map(Layout::of).collect();
    let (pw, ph) = layouts
        .iter()
        .fold((0, 0), |(w, h), l| (w.max(l.width), h.max(l.height)));
    let title_h = if title.is_some() { 40 } else { 0 };
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
    Ok(())
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

impl Layout {
    fn of(p: &Panel) -> Layout {
        let (r, c) = p.dims();
        let cell = (560 / r.max(c)).clamp(4, 64);
        let font = 13.0;
        let row_labels = label_texts(&p.row_labels, r);
        let col_labels = label_texts(&p.col_labels, c);
        let row_w = row_labels
            .iter()
            .map(|s| text_w(s, font))
            .max()
            .unwrap_or(0)
            .min(140);
        let col_w = col_labels
            .iter()
            .map(|s| text_w(s, font))
            .max()
            .unwrap_or(0)
            .min(140);
        let rotate_cols = col_w + 4 > cell * label_step(c, cell, font);
        let col_h = if rotate_cols {
            col_w + 6
        } else {
            font as usize + 6
        };
        let y_axis = if p.y_label.is_some() { 26 } else { 0 };
        let x_axis = if p.x_label.is_some() { 20 } else { 0 };
        let left = PAD + y_axis + row_w + 6;
        let top = PAD + 26;
        let title_w = text_w(&p.title, 15.0) + 2 * PAD;
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
