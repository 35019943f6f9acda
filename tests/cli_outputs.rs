//! `fit_bms`'s outputs as a Unix user meets them: closed pipes, symlinks,
//! FIFOs, full devices and one file spelled two ways. Nothing the fit
//! produced is lost, nothing is replaced that is not a regular file, and
//! the exit status tells both the fit's outcome and the outputs'.
#![cfg(unix)]

mod common;

use common::fit_bms_binary as binary;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A small fit at fixed lambda: converges in well under a second.
const FIT: [&str; 6] = ["--simulate", "300", "--lambda", "10,10", "--backend", "cpu"];

fn command(extra: &[&str]) -> Command {
    let mut c = Command::new(binary());
    c.args(FIT).args(extra).env("MATFREE_GPU", "off");
    c
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("matfree-cli-outputs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn is_json(path: &Path) -> bool {
    serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(path).unwrap()).is_ok()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs with the named standard streams' read ends closed before the
/// child writes a byte (as `| true` and `2>&1 | head -3` leave them).
fn with_closed(extra: &[&str], close_stdout: bool, close_stderr: bool) -> std::process::ExitStatus {
    let mut c = command(extra);
    c.stdout(if close_stdout { Stdio::piped() } else { Stdio::null() });
    c.stderr(if close_stderr { Stdio::piped() } else { Stdio::null() });
    let mut child = c.spawn().unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    child.wait().unwrap()
}

#[test]
fn closed_stdout_or_stderr_keeps_every_file_and_the_fit_status() {
    for (out, err) in [(true, false), (false, true), (true, true)] {
        let d = dir(&format!("closed-{out}-{err}"));
        let (save, json) = (d.join("m.json"), d.join("fit.json"));
        let status = with_closed(&["--save", s(&save), "--json", s(&json), "--verbose"], out, err);
        assert_eq!(status.code(), Some(0), "stdout closed {out}, stderr closed {err}");
        assert!(
            is_json(&save) && is_json(&json),
            "stdout closed {out}, stderr closed {err}"
        );
    }
}

#[test]
fn a_symlinked_output_is_written_through_and_stays_a_link() {
    let d = dir("symlink");
    std::fs::write(d.join("real.json"), "stale").unwrap();
    std::os::unix::fs::symlink("real.json", d.join("link.json")).unwrap();
    let o = command(&["--json", s(&d.join("link.json")), "--quiet"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let link = std::fs::symlink_metadata(d.join("link.json")).unwrap();
    assert!(link.file_type().is_symlink(), "the link was replaced by a file");
    assert!(is_json(&d.join("real.json")), "the link's target was left stale");
}

#[test]
fn a_fifo_output_is_written_in_place_for_its_reader() {
    let d = dir("fifo");
    let fifo = d.join("fit.json");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        println!("a_fifo_output_is_written_in_place_for_its_reader: skipped: mkfifo is not available");
        return;
    }
    let path = fifo.clone();
    let reader = std::thread::spawn(move || std::fs::read_to_string(path).unwrap());
    let o = command(&["--json", s(&fifo), "--quiet"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = reader.join().unwrap();
    assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok(), "{text:?}");
    assert!(
        std::fs::metadata(&fifo).unwrap().file_type().is_fifo(),
        "the FIFO was replaced"
    );
}

#[test]
fn a_full_device_fails_its_output_alone_and_is_not_replaced() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        println!("a_full_device_fails_its_output_alone_and_is_not_replaced: skipped: no /dev/full");
        return;
    }
    // Through a symlink, so that a regression replaces the link, never the
    // device node (the tests run as root in CI).
    let d = dir("full");
    let (link, save) = (d.join("full.json"), d.join("m.json"));
    std::os::unix::fs::symlink(full, &link).unwrap();
    let o = command(&["--json", s(&link), "--save", s(&save), "--quiet"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--json") && stderr(&o).contains("No space left"),
        "{}",
        stderr(&o)
    );
    assert!(is_json(&save), "the other output was lost");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert!(std::fs::metadata(full).unwrap().file_type().is_char_device());
    // A full stdout is an output that failed too; the files are kept.
    let json = d.join("fit.json");
    let stdout = std::fs::OpenOptions::new().write(true).open(full).unwrap();
    let o = command(&["--json", s(&json), "--quiet"])
        .stdout(stdout)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("standard output") && is_json(&json));
}

#[test]
fn one_file_spelled_two_ways_is_refused_before_the_fit() {
    let d = dir("same");
    std::fs::create_dir(d.join("sub")).unwrap();
    std::os::unix::fs::symlink(d.join("sub"), d.join("alias")).unwrap();
    let spellings = [
        ("x.json", "./x.json"),
        ("sub/x.json", "alias/x.json"),
        ("sub/x.json", "sub/../sub/x.json"),
    ];
    for (a, b) in spellings {
        let o = command(&["--json", a, "--plot", b]).current_dir(&d).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{a} and {b}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--json and --plot both name one file"),
            "{}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("evaluation"), "the fit ran before the check");
    }
    assert!(std::fs::read_dir(&d).unwrap().count() == 2, "something was written");
}

#[test]
fn help_lists_the_exit_statuses() {
    let o = Command::new(binary()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "Exit status",
        "0 converged",
        "1 bad input",
        "3 the fit did not converge",
        "4 an output",
    ] {
        assert!(help.contains(needle), "--help should say {needle:?}:\n{help}");
    }
}
