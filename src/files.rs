//! Writing output files without losing or damaging anything.
//!
//! An output is written through to what its path names: a symlink is
//! followed (its target is written, the link stays a link), a regular file
//! (or a path not there yet) is written to a temporary file beside the
//! target and renamed over it, so a failure never leaves half a file, and
//! anything else (a FIFO, a character device such as `/dev/stdout` or
//! `/dev/full`) is opened and written in place, never replaced. Two outputs,
//! or an output and an input, are the same file when their resolved paths
//! are, however they are spelled.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};

/// Symlinks followed at most, as the kernel's own limit (ELOOP beyond).
const MAX_LINKS: usize = 40;

/// The file `path` names, as an absolute path with every symlink followed,
/// also where the file (or a link's target) does not exist yet: its
/// parent is resolved and its name kept. The parent must exist.
pub fn resolve(path: &Path) -> io::Result<PathBuf> {
    let mut current = absolute(path)?;
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = fs::read_link(&current)?;
                let base = current.parent().map(Path::to_path_buf).unwrap_or_default();
                current = normalise(&base.join(target));
            }
            Ok(_) => return fs::canonicalize(&current),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (parent, name) = split(&current)?;
                return Ok(fs::canonicalize(parent)?.join(name));
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "more than {MAX_LINKS} symbolic links to follow"
    )))
}

/// Whether two paths name the same file ([`resolve`]d; a path that cannot
/// be resolved is compared as written).
pub fn same_file(a: &Path, b: &Path) -> bool {
    let r = |p: &Path| resolve(p).unwrap_or_else(|_| p.to_path_buf());
    r(a) == r(b)
}

fn absolute(path: &Path) -> io::Result<PathBuf> {
    if path.as_os_str().is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the path is empty"));
    }
    Ok(normalise(&std::path::absolute(path)?))
}

/// `.` dropped; `..` left to the file system (it follows the links before it).
fn normalise(path: &Path) -> PathBuf {
    path.components().filter(|c| *c != Component::CurDir).collect()
}

fn split(path: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "names a directory, not a file",
        )),
    }
}

/// Where [`write`] puts an output's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A regular file, or none yet: written beside and renamed over.
    Regular(PathBuf),
    /// A FIFO, a device or a socket: opened and written in place.
    Special(PathBuf),
}

/// What `path` resolves to and how it is written; a directory is an error.
pub fn target(path: &Path) -> io::Result<Target> {
    let resolved = resolve(path)?;
    match fs::metadata(&resolved) {
        Ok(m) if m.is_dir() => Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")),
        Ok(m) if !m.is_file() => Ok(Target::Special(resolved)),
        _ => Ok(Target::Regular(resolved)),
    }
}

/// The temporary file a regular output is written to before it is renamed.
pub fn partial(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

/// Write `contents` to what `path` names (see the module's rules).
pub fn write(path: &Path, contents: &[u8]) -> io::Result<()> {
    match target(path)? {
        Target::Special(p) => OpenOptions::new().write(true).open(p)?.write_all(contents),
        Target::Regular(p) => write_by_rename(&p, contents),
    }
}

fn write_by_rename(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = partial(path);
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        // A file written again keeps its permissions.
        if let Ok(old) = fs::metadata(path) {
            fs::set_permissions(&tmp, old.permissions())?;
        }
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Whether [`write`] could write `path`, checked before the work that fills
/// it: a regular target's temporary file is created and removed; a special
/// file is not opened (a FIFO's open would wait for its reader), only
/// looked up.
pub fn check_writable(path: &Path) -> io::Result<()> {
    match target(path)? {
        Target::Special(_) => Ok(()),
        Target::Regular(p) => {
            let tmp = partial(&p);
            fs::File::create(&tmp)?;
            fs::remove_file(&tmp)
        }
    }
}

/// Outputs checked before the work that fills them, each named by the
/// option that asked for it (`("--json", path)`): not a directory, not the
/// same file as any of the `inputs` or as another output (by resolved path,
/// however spelled), and writable ([`check_writable`]). The message names
/// the option and the path.
pub fn check_outputs(outputs: &[(&str, &Path)], inputs: &[&Path]) -> Result<(), String> {
    for (flag, path) in outputs {
        if path.is_dir() {
            return Err(format!("{flag} {}: is a directory", path.display()));
        }
        if let Some(input) = inputs.iter().find(|i| same_file(path, i)) {
            return Err(format!(
                "{flag} {}: is the input data file {}",
                path.display(),
                input.display()
            ));
        }
        check_writable(path).map_err(|e| format!("{flag} {}: cannot be written: {e}", path.display()))?;
    }
    for (i, (a, pa)) in outputs.iter().enumerate() {
        if let Some((b, pb)) = outputs[i + 1..].iter().find(|(_, pb)| same_file(pa, pb)) {
            let (pa, pb) = (pa.display(), pb.display());
            return Err(format!("{a} and {b} both name one file ({pa} and {pb})"));
        }
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::FileTypeExt;

    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("matfree-files-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_symlink_is_written_through_and_stays_a_link() {
        let d = dir("link");
        fs::write(d.join("real.json"), "old").unwrap();
        std::os::unix::fs::symlink("real.json", d.join("link.json")).unwrap();
        write(&d.join("link.json"), b"new").unwrap();
        assert!(fs::symlink_metadata(d.join("link.json"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(d.join("real.json")).unwrap(), "new");
        assert!(!d.join("real.json.partial").exists() && !d.join("link.json.partial").exists());
    }

    #[test]
    fn a_dangling_symlink_creates_its_target() {
        let d = dir("dangling");
        std::os::unix::fs::symlink("sub/../target.txt", d.join("link")).unwrap();
        fs::create_dir(d.join("sub")).unwrap();
        write(&d.join("link"), b"x").unwrap();
        assert_eq!(fs::read_to_string(d.join("target.txt")).unwrap(), "x");
        assert!(fs::symlink_metadata(d.join("link")).unwrap().file_type().is_symlink());
    }

    #[test]
    fn spellings_of_one_file_are_the_same_file() {
        let d = dir("same");
        fs::create_dir(d.join("a")).unwrap();
        std::os::unix::fs::symlink(d.join("a"), d.join("b")).unwrap();
        assert!(same_file(&d.join("a/x.json"), &d.join("b/./x.json")));
        assert!(same_file(&d.join("a/x.json"), &d.join("a/../a/x.json")));
        assert!(!same_file(&d.join("a/x.json"), &d.join("a/y.json")));
    }

    #[test]
    fn a_link_loop_is_an_error_not_a_hang() {
        let d = dir("loop");
        std::os::unix::fs::symlink("b", d.join("a")).unwrap();
        std::os::unix::fs::symlink("a", d.join("b")).unwrap();
        assert!(write(&d.join("a"), b"x").is_err());
    }

    #[test]
    fn devices_are_written_in_place_and_a_full_one_fails() {
        assert_eq!(
            target(Path::new("/dev/null")).unwrap(),
            Target::Special("/dev/null".into())
        );
        write(Path::new("/dev/null"), b"x").unwrap();
        assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        if Path::new("/dev/full").exists() {
            let e = write(Path::new("/dev/full"), b"x").unwrap_err();
            assert_eq!(e.raw_os_error(), Some(28), "{e}"); // ENOSPC
        }
    }

    #[test]
    fn a_directory_is_refused() {
        let d = dir("isdir");
        assert!(write(&d, b"x").is_err() && check_writable(&d).is_err());
    }

    #[test]
    fn a_rewritten_file_keeps_its_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("perm");
        let f = d.join("out.csv");
        fs::write(&f, "old").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
        write(&f, b"new").unwrap();
        assert_eq!(fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o640);
    }
}
