// SPDX-License-Identifier: MIT
// Writes files in a directory as Rust programs do: std::fs (through libc)
// and tempfile, whose persist renames with rustix's raw system calls (no
// libc). Prints the directory's files with their sizes; exits 1 on any
// unexpected error, naming the step.
// Builds with Rust 1.63 (Debian 12): no let-else.

use std::fs;
use std::io::{self, ErrorKind, Write};
use std::path::Path;
use std::process;

// The same bytes on every run: the test compares two runs' files.
fn model_data() -> Vec<u8> {
    let mut x: u32 = 12345;
    (0..300 * 1024)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect()
}

fn fail(what: &str, msg: &str) -> io::Error {
    io::Error::new(ErrorKind::Other, format!("{}: {}", what, msg))
}

// Names the step that failed.
fn step<T>(what: &str, r: io::Result<T>) -> io::Result<T> {
    r.map_err(|e| io::Error::new(e.kind(), format!("{}: {}", what, e)))
}

fn read_check(path: &Path, want: &[u8]) -> io::Result<()> {
    let what = path.display().to_string();
    if step(&what, fs::read(path))? != want {
        return Err(fail(&what, "wrong content"));
    }
    Ok(())
}

fn run(dir: &Path) -> io::Result<()> {
    let (notes, old, model) = (
        dir.join("notes.txt"),
        dir.join("notes.old"),
        dir.join("model.bin"),
    );
    let text = b"written with std::fs\n";
    step("write notes.txt", fs::write(&notes, text))?;
    read_check(&notes, text)?;
    step("rename notes.txt", fs::rename(&notes, &old))?;

    // NamedTempFile: a .tmpXXXXXX name, then a raw renameat onto the name.
    let data = model_data();
    let mut tmp = step("NamedTempFile", tempfile::NamedTempFile::new_in(dir))?;
    step("write .tmp", tmp.write_all(&data))?;
    let persisted = tmp.persist(&model).map_err(|e| e.error);
    step("persist model.bin", persisted)?;
    read_check(&model, &data)?;

    // persist_noclobber: renameat2 RENAME_NOREPLACE (or link + unlink),
    // which must refuse an existing name; dropping the error removes the
    // temporary file.
    let builder = tempfile::Builder::new().prefix(".part").tempfile_in(dir);
    let mut tmp = step("Builder", builder)?;
    step("write .part", tmp.write_all(b"must not replace\n"))?;
    match tmp.persist_noclobber(&old) {
        Ok(_) => return Err(fail("persist_noclobber notes.old", "replaced it")),
        Err(e) if e.error.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return step("persist_noclobber notes.old", Err(e.error)),
    }
    read_check(&old, text)?;

    let mut files = Vec::new();
    for entry in step("read_dir", fs::read_dir(dir))? {
        let entry = step("read_dir", entry)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        files.push((name, step("metadata", entry.metadata())?.len()));
    }
    files.sort();
    for (name, size) in files {
        println!("{} {}", name, size);
    }
    Ok(())
}

fn main() {
    let dir = match std::env::args_os().nth(1) {
        Some(d) => d,
        None => {
            eprintln!("usage: rawfs DIR");
            process::exit(2);
        }
    };
    if let Err(e) = run(Path::new(&dir)) {
        eprintln!("rawfs: {}", e);
        process::exit(1);
    }
}
