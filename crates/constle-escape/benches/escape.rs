//! Stream escaping throughput, beside a bare copy measured in the same run.
//!
//! Each input is 4 MiB escaped in 64 KiB pieces, as `forward` reads them,
//! into one reused string:
//!
//! - `copy/ascii`: the baseline, the same text appended as it is.
//! - `stream/ascii`: plain ASCII lines, the common case (the fast path).
//! - `stream/utf8`: lines of Cyrillic and CJK text, checked per character.
//! - `stream/escapes`: coloured test output with carriage returns and stray
//!   bytes, nearly every line with something to escape.
//! - `forward/ascii`: the plain lines through `forward` into `io::sink`.
//! - `*_cpu`: the same work timed by the process's CPU time instead of the
//!   clock, which other programs on a shared machine disturb far less.

#![allow(
    clippy::expect_used,
    reason = "a benchmark that cannot set up must stop"
)]

use std::hint::black_box;

use constle_escape::{CHUNK_BYTES, StreamEscaper, forward};
use constle_testkit::bench::process_cpu_of;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const INPUT_BYTES: usize = 4 << 20;

/// `line` repeated to [`INPUT_BYTES`].
fn repeated(line: &[u8]) -> Vec<u8> {
    line.repeat(INPUT_BYTES / line.len())
}

fn ascii() -> Vec<u8> {
    repeated(b"test escape::stream::output_holds_nothing_unsafe ... ok (0.25s)\n")
}

fn utf8() -> Vec<u8> {
    repeated("Сборка завершена успешно: 構建成功、テストはすべて合格しました。\n".as_bytes())
}

fn escapes() -> Vec<u8> {
    repeated(b"\x1b[32m\xe2\x9c\x93\x1b[0m step \x1b[1mdone\x1b[0m\r\n\x9b2K\xff\x07\n")
}

/// Escapes `input` in [`CHUNK_BYTES`] pieces into `out`.
fn escape_stream(input: &[u8], out: &mut String) {
    let mut escaper = StreamEscaper::new();
    for piece in input.chunks(CHUNK_BYTES) {
        out.clear();
        escaper.push(piece, out);
        black_box(&out);
    }
    out.clear();
    escaper.finish(out);
}

/// Appends each of `pieces`, as it is, into `out`.
fn copy(pieces: &[&str], out: &mut String) {
    for piece in pieces {
        out.clear();
        out.push_str(piece);
        black_box(&out);
    }
}

fn stream(c: &mut Criterion) {
    let mut out = String::with_capacity(6 * CHUNK_BYTES);
    let ascii_text = ascii();
    let pieces: Vec<&str> = ascii_text
        .chunks(CHUNK_BYTES)
        .map(|piece| std::str::from_utf8(piece).expect("ASCII"))
        .collect();
    let mut group = c.benchmark_group("copy");
    group.throughput(Throughput::Bytes(INPUT_BYTES as u64));
    group.bench_function("ascii", |b| b.iter(|| copy(&pieces, &mut out)));
    group.bench_function("ascii_cpu", |b| {
        b.iter_custom(|iters| process_cpu_of(iters, || copy(&pieces, &mut out)))
    });
    group.finish();

    let mut group = c.benchmark_group("stream");
    group.throughput(Throughput::Bytes(INPUT_BYTES as u64));
    for (name, input) in [("ascii", ascii()), ("utf8", utf8()), ("escapes", escapes())] {
        group.bench_function(name, |b| b.iter(|| escape_stream(&input, &mut out)));
        group.bench_function(format!("{name}_cpu"), |b| {
            b.iter_custom(|iters| process_cpu_of(iters, || escape_stream(&input, &mut out)))
        });
    }
    group.finish();

    let input = ascii();
    let mut group = c.benchmark_group("forward");
    group.throughput(Throughput::Bytes(INPUT_BYTES as u64));
    group.bench_function("ascii", |b| b.iter(|| forward(&input[..], std::io::sink())));
    group.finish();
}

criterion_group!(benches, stream);
criterion_main!(benches);
