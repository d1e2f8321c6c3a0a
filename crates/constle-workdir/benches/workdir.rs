//! The work directory's checks on trees of 1 000, 10 000 and 100 000 small
//! files (a hundred to a directory, one git repository), beside a bare walk
//! of the same tree measured in the same run:
//!
//! - `walk/N`: the baseline, `std::fs::read_dir` and `symlink_metadata` of
//!   every entry, what any tool that looks at each file pays.
//! - `checks/N`: `Workdir::prepare` then `Workdir::finish` on the unchanged
//!   tree, what a run with such a work directory pays (both walks, the
//!   snapshot of executable configuration, git reading its configuration).

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "a benchmark that cannot set up must stop"
)]

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use constle_workdir::{Acting, Workdir};
use criterion::{Criterion, criterion_group, criterion_main};

fn make_tree(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{:02}.txt", i % 100)), "x\n").unwrap();
    }
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(root)
        .status()
        .expect("git");
    assert!(git.success());
}

fn bare_walk(root: &Path) -> usize {
    let mut seen = 0;
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path);
            }
            seen += 1;
        }
    }
    seen
}

fn checks(c: &mut Criterion) {
    let base = tempfile::tempdir().unwrap();
    let quarantine = base.path().join("quarantine");
    for files in [1_000, 10_000, 100_000] {
        let root = base.path().join(format!("work-{files}"));
        std::fs::create_dir(&root).unwrap();
        make_tree(&root, files);
        let mut group = c.benchmark_group(format!("{files}"));
        if files >= 100_000 {
            group
                .sample_size(10)
                .measurement_time(Duration::from_secs(20));
        }
        group.bench_function("walk", |b| b.iter(|| black_box(bare_walk(&root))));
        group.bench_function("checks", |b| {
            b.iter(|| {
                let workdir = Workdir::prepare(&root, Acting::this_user()).unwrap();
                black_box(workdir.finish(&quarantine).unwrap())
            })
        });
        group.finish();
    }
}

criterion_group!(benches, checks);
criterion_main!(benches);
